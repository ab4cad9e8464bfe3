"""The OAuth endpoints for /api/mcp clients: consent, token, registration, and Disconnect on the account page."""

import json
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode, urlsplit

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect, render, resolve_url
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.models import Application, Grant, RefreshToken
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import (
    AuthorizationView,
    OAuthProtectedResourceMetadataView,
    OAuthServerMetadataView,
    RevokeTokenView,
    TokenView,
)
from oauthlib.oauth2.rfc6749 import errors

from accounts import oauth, throttle
from accounts.forms import ConsentForm
from accounts.models import SCOPE_READ, SCOPE_WRITE, User
from accounts.services import AccountError
from leroy import metrics
from leroy.ratelimit import rate_limit_retry_after


def _harden(response: HttpResponseBase) -> HttpResponseBase:
    # The site-wide policy (settings.SECURE_CSP) already forbids framing and anything but our own files.
    # The URL carries state and the PKCE challenge: never sent to another site. Not no-referrer: browsers then
    # send `Origin: null` on the consent POST, which Django's CSRF check refuses.
    response["Referrer-Policy"] = "same-origin"
    response["Cache-Control"] = "no-store"
    return response


def _method_not_allowed(request: HttpRequest, allowed: list[str]) -> JsonResponse:
    """A method a JSON endpoint does not take: a JSON 405 in RFC 6749's error shape, as its other refusals are,
    with its Allow header (not the site's HTML page, which a client could not read)."""
    allow = ", ".join(allowed)
    description = f"{request.path} takes {allow}, not {request.method}."
    response = JsonResponse({"error": "invalid_request", "error_description": description}, status=405)
    response["Allow"] = allow
    response["Cache-Control"] = "no-store"
    return response


class JSONMethodRefusal(View):
    """A class-based JSON endpoint's 405: the JSON refusal, naming the methods the view defines."""

    def http_method_not_allowed(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _method_not_allowed(
            request, [method.upper() for method in self.http_method_names if hasattr(self, method)]
        )


def _post_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`require_POST` for a JSON endpoint: any other method gets the JSON 405."""

    @wraps(view)
    def only_post(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method != "POST":
            return _method_not_allowed(request, ["POST"])
        return view(request, *args, **kwargs)

    return only_post


def _shown_key(client_id: str, code_challenge: str | None) -> str:
    return f"leroy.oauth.consent:{client_id}:{code_challenge or ''}"


class McpAuthorizationView(AuthorizationView):
    """DOT's authorization endpoint, refusing before consent anything Leroy will not issue (S256, resource).

    Errors render a page and never redirect to the client: anyone can register a client with any redirect
    URI, so an error redirect before the user has acted would be an open redirector (RFC 9700 §4.11.2).
    """

    template_name = "accounts/oauth_consent.html"
    form_class = ConsentForm

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        # Consent is never skipped on the client's say-so (approval_prompt=auto).
        query = request.GET.copy()
        query.pop("approval_prompt", None)
        request.GET = query  # type: ignore[assignment]
        return _harden(super().get(request, *args, **kwargs))

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return _harden(super().post(request, *args, **kwargs))

    def handle_no_permission(self) -> HttpResponseBase:
        # Signed out: always the login page. DOT's prompt=none answers by redirecting to the client.
        return redirect_to_login(
            self.request.get_full_path(), resolve_url(self.get_login_url()), self.get_redirect_field_name()
        )

    def validate_authorization_request(self, request: HttpRequest) -> tuple[list[str], dict[str, Any]]:
        scopes, credentials = super().validate_authorization_request(request)
        state, redirect_uri = credentials.get("state"), credentials["redirect_uri"]
        challenge = credentials.get("code_challenge") or ""
        if credentials.get("code_challenge_method") != "S256" or not oauth.CODE_CHALLENGE.match(challenge):
            error = errors.InvalidRequestError(description="PKCE with code_challenge_method=S256 is required.")
            error.state = state
            raise OAuthToolkitError(error, redirect_uri=redirect_uri)
        if not oauth.is_mcp_resource(request.GET.getlist("resource")):
            raise OAuthToolkitError(oauth.invalid_target(state=state), redirect_uri=redirect_uri)
        return scopes, credentials

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        application: Application | None = context.get("application")
        if application is not None:
            # Remember what this page showed: the POST may grant only these scopes, whatever its hidden fields say.
            self.request.session[_shown_key(application.client_id, context.get("code_challenge"))] = " ".join(
                sorted(context["scopes"])
            )
            host = urlsplit(context["redirect_uri"]).hostname or ""
            context.update(
                redirect_host=host,
                loopback=host in oauth.LOOPBACK_HOSTS,
                imitates_leroy=oauth.imitates_leroy(application.name),
                write_requested=SCOPE_WRITE in context["scopes"],
                read_description=settings.LEROY_OAUTH_SCOPES[SCOPE_READ],
                write_description=settings.LEROY_OAUTH_SCOPES[SCOPE_WRITE],
            )
        return context

    def form_valid(self, form: ConsentForm) -> HttpResponseBase:
        if not Application.objects.filter(client_id=form.cleaned_data["client_id"]).exists():
            return self._error_page("invalid_client", "Unknown client.", 400)
        shown = self.request.session.pop(
            _shown_key(form.cleaned_data["client_id"], form.cleaned_data.get("code_challenge")), None
        )
        if shown is None or shown != " ".join(sorted(form.cleaned_data["scope"].split())):
            return self._error_page("invalid_request", "The consent form does not match the page you were shown.", 400)
        # Every token reads; mcp:write only when the client asked for it and the user left it granted.
        requested = form.cleaned_data["scope"].split()
        write = SCOPE_WRITE in requested and form.cleaned_data["grant_write"]
        form.cleaned_data["scope"] = f"{SCOPE_READ} {SCOPE_WRITE}" if write else SCOPE_READ
        return super().form_valid(form)

    def form_invalid(self, form: ConsentForm) -> HttpResponseBase:
        return self._error_page("invalid_request", "The consent form was incomplete.", 400)

    def error_response(self, error: OAuthToolkitError, application: Application | None, **kwargs: Any) -> HttpResponse:
        failure = error.oauthlib_error
        redirect_uri = getattr(failure, "redirect_uri", None) or ""
        # Only a Cancel by the user goes back to the client, and only to a URI registered for it.
        if (
            self.request.method == "POST"
            and failure.error == "access_denied"
            and application is not None
            and application.redirect_uri_allowed(redirect_uri)
        ):
            params = {"error": "access_denied"}
            if failure.state:
                params["state"] = failure.state
            params["iss"] = oauth2_settings.oauth2_authorization_server_issuer(self.request)
            separator = "&" if "?" in redirect_uri else "?"
            return self.redirect(redirect_uri + separator + urlencode(params), application)
        return self._error_page(failure.error, failure.description, failure.status_code)

    def _error_page(self, code: str, description: str, status: int) -> HttpResponse:
        context = {"error": code, "description": description}
        return render(self.request, "accounts/oauth_error.html", context, status=status)


class McpTokenView(JSONMethodRefusal, TokenView):
    """DOT's token endpoint, serialising concurrent use of one refresh token or code (notes/oauth.md G3).

    The loser of a race waits on the row lock, then finds the token spent: the stock reuse path revokes the
    whole family and answers invalid_grant, instead of a 500.
    """

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        grant_type = request.POST.get("grant_type")
        if grant_type not in oauth2_settings.OAUTH2_GRANT_TYPES_SUPPORTED:
            # Only what the metadata advertises reaches DOT: its device-flow branch runs ahead of oauthlib's grant
            # check and read a missing device_code as a 500.
            refused = errors.UnsupportedGrantTypeError()
            response = HttpResponse(refused.json, status=refused.status_code, content_type="application/json")
            response["Cache-Control"] = "no-store"
            return response
        if grant_type == "authorization_code":
            # Codes are stored hashed (LeroyValidator._create_authorization_code): look them up by hash.
            body = request.POST.copy()
            body["code"] = oauth.sha256_hex(body.get("code", ""))
            request.POST = body  # type: ignore[assignment]
        with transaction.atomic():
            if grant_type == "refresh_token":
                checksum = oauth.sha256_hex(request.POST.get("refresh_token", ""))
                list(RefreshToken.objects.select_for_update().filter(token_checksum=checksum))
            elif grant_type == "authorization_code":
                list(Grant.objects.select_for_update().filter(code=request.POST["code"]))
            response = super().post(request, *args, **kwargs)
        # Errors raised while saving (e.g. invalid_target) come back from DOT without these headers.
        response["Content-Type"] = "application/json"
        response["Cache-Control"] = "no-store"
        return response


class McpRevokeTokenView(JSONMethodRefusal, RevokeTokenView):
    """DOT's revocation endpoint (RFC 7009), refusing other methods in JSON as the token endpoint does."""


class McpServerMetadataView(JSONMethodRefusal, OAuthServerMetadataView):
    """DOT's authorization server metadata (RFC 8414), refusing other methods in JSON."""


class McpResourceMetadataView(JSONMethodRefusal, OAuthProtectedResourceMetadataView):
    """DOT's protected resource metadata (RFC 9728), refusing other methods in JSON."""


@csrf_exempt
@_post_only
def register(request: HttpRequest) -> JsonResponse:
    """RFC 7591 dynamic registration of a public client; no registration access token is issued."""
    address = throttle.client_address(request)
    limit = settings.LEROY_OAUTH_REGISTRATIONS_PER_MINUTE
    retry_after = async_to_sync(rate_limit_retry_after)(f"dcr:{address}", limit)
    if retry_after is not None:
        metrics.RATE_LIMIT_REFUSALS.labels("oauth_registration").inc()
        response = JsonResponse(
            {"error": "too_many_requests", "error_description": f"At most {limit} registrations per minute."},
            status=429,
        )
        response["Retry-After"] = str(retry_after)
        response["Cache-Control"] = "no-store"  # like every other registration answer (RFC 7591 §3.2)
        return response
    try:
        metadata = json.loads(request.body)
        registered = oauth.oauth_client_register(metadata=metadata)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        response = JsonResponse(
            {"error": "invalid_client_metadata", "error_description": "The body must be a JSON object."}, status=400
        )
    except oauth.RegistrationError as failure:
        response = JsonResponse({"error": failure.code, "error_description": failure.description}, status=400)
    else:
        oauth.oauth_clients_collect_garbage()
        response = JsonResponse(registered.metadata, status=201)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def client_disconnect(request: HttpRequest, client_id: str) -> HttpResponse:
    assert isinstance(request.user, User)
    try:
        application = oauth.oauth_client_disconnect(user=request.user, client_id=client_id)
    except AccountError as error:
        messages.error(request, error.message)
        return redirect("accounts:clients")
    messages.success(request, f"Disconnected {application.name or 'the unnamed client'}.")
    return redirect("accounts:clients")
