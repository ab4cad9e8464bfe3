"""The account pages: sign-up, sign-in (with lockout), password reset and change, e-mail change, MCP keys and
connected OAuth clients."""

import json
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from django.views.generic import View

from accounts import oauth, selectors, services, throttle
from accounts.forms import (
    AccountPasswordResetForm,
    ActivationForm,
    ApiKeyCreateForm,
    ChangePasswordForm,
    CredentialsRevocation,
    CurrentPasswordForm,
    EmailAuthenticationForm,
    EmailChangeForm,
    ResetPasswordForm,
    SignupForm,
)
from accounts.models import ApiKey, User

NEW_KEY_COOKIE = "leroy_new_key"
NEW_KEY_SALT = "accounts.new-key"
SIGNUP_NEXT = "accounts.signup-next"
EMAILS_THROTTLED = (
    "Too many e-mails were requested for this address or from this network. Try again in {minutes} minutes."
)
LOCKED_OUT = (
    "Too many failed sign-ins for this address or from this network. Try again in {minutes} minutes, "
    "or reset your password."
)


def account_page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Signed-in only, and never stored by a browser or proxy cache."""
    return never_cache(login_required(view))


def _next_on_site(request: HttpRequest) -> str:
    """The `next` page to continue to (e.g. an OAuth consent page), only if it is a URL on this site: an absolute
    path or URL (a bare word would be read as a view's name by `redirect`), with no control character (a line break
    cannot go into a Location header)."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    on_site = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    url_like = target.startswith("/") or bool(urlsplit(target).scheme)
    controls = any(ord(character) < 0x20 or ord(character) == 0x7F for character in target)
    return target if on_site and url_like and not controls else ""


def _emails_throttled(request: HttpRequest, email: str, template: str, **context: Any) -> HttpResponse | None:
    """The form again with a 429 when Leroy has e-mailed this address, or for this client, too often; nothing is
    sent. The same answer whether or not the address has an account."""
    address = throttle.client_address(request)
    retry_after = throttle.email_send_retry_after(email=email, address=address)
    if retry_after is None:
        return None
    minutes = max(1, -(-retry_after // 60))
    context["throttled"] = EMAILS_THROTTLED.format(minutes=minutes)
    response = render(request, template, context, status=429)
    response["Retry-After"] = str(retry_after)
    return response


@require_http_methods(["GET", "HEAD", "POST"])
@never_cache
def signup(request: HttpRequest) -> HttpResponse:
    next_url = _next_on_site(request)
    if request.user.is_authenticated:
        return redirect(next_url or "accounts:account")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"]
        if refused := _emails_throttled(request, email, "accounts/signup.html", form=form, next=next_url):
            return refused
        services.signup_request(email=form.cleaned_data["email"], next_url=next_url)
        # The same page whether or not the address has an account: sign-up reveals nothing.
        return render(request, "accounts/signup_sent.html", {"email": form.cleaned_data["email"]})
    return render(request, "accounts/signup.html", {"form": form, "next": next_url})


@method_decorator(never_cache, name="dispatch")
class SignupConfirmView(auth_views.PasswordResetConfirmView):
    """The e-mailed sign-up link: choose a password, which activates the account and signs in."""

    template_name = "accounts/signup_confirm.html"
    form_class = ActivationForm
    post_reset_login = True
    post_reset_login_backend = "django.contrib.auth.backends.ModelBackend"
    reset_url_token = "set-password"  # noqa: S105  (a URL segment, not a secret)

    def dispatch(self, *args: Any, **kwargs: Any) -> HttpResponseBase:
        # Django swaps the token for a session marker by redirecting, which drops the query: keep `next`.
        if next_url := _next_on_site(self.request):
            self.request.session[SIGNUP_NEXT] = next_url
        return super().dispatch(*args, **kwargs)

    def get_user(self, uidb64: str) -> User | None:
        user: User | None = super().get_user(uidb64)
        return None if user is not None and services.suspended(user) else user  # its link is invalid

    def get_success_url(self) -> str:
        return self.request.session.pop(SIGNUP_NEXT, "") or reverse("accounts:account")

    def form_valid(self, form: Any) -> HttpResponse:
        next_url = self.request.session.get(SIGNUP_NEXT, "")
        response = super().form_valid(form)  # signs in, which cycles the session
        if next_url:
            response["Location"] = next_url
        messages.success(self.request, "Your account is ready.")
        return response


@require_http_methods(["GET", "HEAD", "POST"])
@never_cache
def admin_login(request: HttpRequest) -> HttpResponse:
    """Django admin's sign-in page: staff sign in through the account sign-in and its lockout (admin's own form
    checked passwords without it). A signed-in account without staff access is refused, not sent round again."""
    if request.user.is_authenticated:
        if request.user.is_active and request.user.is_staff:
            return redirect(_next_on_site(request) or reverse("admin:index"))
        raise PermissionDenied("This account has no access to the admin site.")
    return redirect_to_login(_next_on_site(request) or reverse("admin:index"), reverse("accounts:login"))


@method_decorator(never_cache, name="dispatch")
class EmailLoginView(auth_views.LoginView):
    template_name = "accounts/login.html"
    authentication_form = EmailAuthenticationForm
    redirect_authenticated_user = True

    def _who(self) -> dict[str, str]:
        return {
            "email": self.request.POST.get("username", ""),
            "address": throttle.client_address(self.request),
        }

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not throttle.login_attempt(**self._who()):
            # The password is not even checked while locked.
            form = self.authentication_form(request, initial={"username": self._who()["email"]})
            minutes = settings.LEROY_LOGIN_LOCKOUT_SECONDS // 60
            context = self.get_context_data(form=form, locked=LOCKED_OUT.format(minutes=minutes))
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: Any) -> HttpResponse:
        throttle.login_succeeded(**self._who())  # else the attempt stays counted as a failure
        return super().form_valid(form)


class PasswordResetView(auth_views.PasswordResetView):
    """Django's reset: the same answer whether or not the address has an account; links use the public origin."""

    template_name = "accounts/password_reset.html"
    form_class = AccountPasswordResetForm  # its mail is sent by a worker, never inside the request
    email_template_name = "accounts/email/password_reset.txt"
    subject_template_name = "accounts/email/password_reset_subject.txt"
    success_url = reverse_lazy("accounts:password-reset-done")

    def form_valid(self, form: Any) -> HttpResponse:
        if refused := _emails_throttled(self.request, form.cleaned_data["email"], self.template_name, form=form):
            return refused
        self.extra_email_context = {"origin": settings.LEROY_PUBLIC_ORIGIN}  # never the request's Host header
        return super().form_valid(form)


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "accounts/password_reset_confirm.html"
    form_class = ResetPasswordForm
    success_url = reverse_lazy("accounts:password-reset-complete")

    def form_valid(self, form: Any) -> HttpResponse:
        # The lockout's page offers a reset: a new password ends the account's count (not the address's).
        throttle.login_count_clear(email=form.user.email)
        return _password_saved(self, form, partial(super().form_valid, form))


@method_decorator(never_cache, name="dispatch")
class PasswordChangeView(auth_views.PasswordChangeView):
    """A signed-in account's new password. The current one is checked under the sign-in lockout (a borrowed session
    cannot guess it without limit); the new one keeps this browser signed in and signs every other one out."""

    template_name = "accounts/password_change.html"
    form_class = ChangePasswordForm
    success_url = reverse_lazy("accounts:account")

    def _user(self) -> User:
        assert isinstance(self.request.user, User)  # login_required
        return self.request.user

    def _who(self) -> dict[str, str]:
        return {"email": self._user().email, "address": throttle.client_address(self.request)}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if locked := attempt_refused(request, self._user()):
            context = self.get_context_data(form=self.form_class(self._user()), locked=locked)
            return self.render_to_response(context, status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        if "old_password" not in form.errors:  # the current password was right (the new one was refused)
            throttle.login_succeeded(**self._who())
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        throttle.login_succeeded(**self._who())
        done = "Your password is changed. Other signed-in browsers are signed out."
        return _password_saved(self, form, partial(super().form_valid, form), done)


def attempt_refused(request: HttpRequest, user: User) -> str | None:
    """Count a check of the signed-in account's current password as a sign-in attempt (so a borrowed session cannot
    guess it without limit); the lockout's message when it is refused, else None."""
    if throttle.login_attempt(email=user.email, address=throttle.client_address(request)):
        return None
    return LOCKED_OUT.format(minutes=settings.LEROY_LOGIN_LOCKOUT_SECONDS // 60)


def password_form_judged(request: HttpRequest, form: CurrentPasswordForm) -> str | None:
    """Judge a posted CurrentPasswordForm under the sign-in lockout: the lockout's message when locked (the password
    is not even checked); else None, the form judged (`is_valid()`), a wrong password's attempt left counted and a
    right one's taken back."""
    if locked := attempt_refused(request, form.user):
        return locked
    form.is_valid()
    if "password" not in form.errors:
        throttle.login_succeeded(email=form.user.email, address=throttle.client_address(request))
    return None


@require_http_methods(["GET", "HEAD", "POST"])
@account_page
def email_change(request: HttpRequest) -> HttpResponse:
    """Ask to move the account to another address: a link goes to the new one, and nothing changes until it is
    followed."""
    assert isinstance(request.user, User)
    user, template = request.user, "accounts/email_change.html"
    form = EmailChangeForm(user, request.POST or None)
    if request.method == "POST":
        if locked := password_form_judged(request, form):
            return render(request, template, {"form": EmailChangeForm(user), "locked": locked}, status=429)
        if form.is_valid():
            new = form.cleaned_data["email"]
            if refused := _emails_throttled(request, new, template, form=form):
                return refused
            services.email_change_request(user=user, new_email=new)
            return render(request, "accounts/email_change_sent.html", {"new": new})
    return render(request, template, {"form": form})


@method_decorator(never_cache, name="dispatch")
class EmailChangeConfirmView(View):
    """The link mailed to the new address: its page asks, and only the button (a POST) moves the account, so a mail
    scanner that opens links changes nothing."""

    template_name = "accounts/email_change_confirm.html"

    def get(self, request: HttpRequest, token: str) -> HttpResponse:
        try:
            change = services.email_change_of(token)
        except services.AccountError as error:
            return render(request, self.template_name, {"invalid": error.message}, status=400)
        return render(request, self.template_name, {"old": change.old, "new": change.new})

    def post(self, request: HttpRequest, token: str) -> HttpResponse:
        try:
            change = services.email_change_confirm(token=token)
        except services.AccountError as error:
            return render(request, self.template_name, {"invalid": error.message}, status=400)
        messages.success(request, f"This account now uses {change.new}.")
        signed_in_here = request.user.is_authenticated and request.user.pk == change.user.pk
        return redirect("accounts:account" if signed_in_here else "accounts:login")


def _password_saved(
    view: auth_views.PasswordChangeView | auth_views.PasswordResetConfirmView,
    form: CredentialsRevocation,
    save: Callable[[], HttpResponse],
    done: str = "",
) -> HttpResponse:
    """Save a new password (Django's `form_valid`, through `save`), say `done`, and revoke the account's MCP
    credentials when the form asks, in one transaction; an account closed or suspended meanwhile gets the form again
    with why (409), nothing changed."""
    user: User = form.user  # type: ignore[attr-defined]
    try:
        with transaction.atomic():
            response = save()
            if done:
                messages.success(view.request, done)
            if form.cleaned_data["revoke_credentials"]:
                keys = services.api_keys_revoke_all(user=user)
                oauth.oauth_clients_disconnect_all(user=user)
                messages.success(view.request, f"Revoked {keys} API key(s) and disconnected every OAuth client.")
    except services.AccountError as error:
        form.add_error(None, error.message)
        return view.render_to_response(view.get_context_data(form=form), status=409)
    return response


def _new_key(request: HttpRequest, user: User) -> tuple[ApiKey, str] | None:
    """The key created just before this redirect, from its one-time signed cookie, if it is this user's."""
    plaintext = request.get_signed_cookie(NEW_KEY_COOKIE, default=None, salt=NEW_KEY_SALT, max_age=300)
    if not plaintext:
        return None
    api_key = ApiKey.objects.filter(user=user, key_hash=services.hash_key(plaintext), revoked_at__isnull=True).first()
    return (api_key, plaintext) if api_key else None


def client_snippets(*, key: str) -> dict[str, str]:
    """Ready-made configurations for the new key: generic MCP JSON, Claude Desktop (through mcp-remote), curl."""
    url = settings.LEROY_PUBLIC_ORIGIN + settings.LEROY_MCP_PATH
    generic = {"mcpServers": {"leroy": {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {key}"}}}}
    claude = {
        "mcpServers": {
            "leroy": {"command": "npx", "args": ["-y", "mcp-remote", url, "--header", f"Authorization: Bearer {key}"]}
        }
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    curl = (
        f"curl -s {url} \\\n  -H 'Authorization: Bearer {key}' \\\n  -H 'Content-Type: application/json' \\\n"
        f"  -H 'Accept: application/json, text/event-stream' \\\n  -d '{body}'"
    )
    return {"generic": json.dumps(generic, indent=2), "claude": json.dumps(claude, indent=2), "curl": curl}


def _keys_context(user: User, **extra: object) -> dict[str, object]:
    return {
        "keys": selectors.api_key_list(user=user),
        "active_count": selectors.api_key_active_count(user=user),
        "max_active": settings.LEROY_API_KEYS_MAX_ACTIVE,
        "mcp_url": settings.LEROY_PUBLIC_ORIGIN + settings.LEROY_MCP_PATH,
        "form": ApiKeyCreateForm(),
        **extra,
    }


@require_safe
@account_page
def account(request: HttpRequest) -> HttpResponse:
    """MCP activation and API keys. A new key is shown on the GET after its POST, once, then never again."""
    assert isinstance(request.user, User)
    extra: dict[str, object] = {}
    new = _new_key(request, request.user)
    if new is not None:
        extra = {"issued": new[0], "plaintext": new[1], "snippets": client_snippets(key=new[1])}
    response = render(request, "accounts/account.html", _keys_context(request.user, **extra))
    response.delete_cookie(NEW_KEY_COOKIE, path=reverse("accounts:account"))
    return response


@require_safe
@account_page
def clients(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    context = {"oauth_clients": oauth.oauth_connected_clients(user=request.user)}
    return render(request, "accounts/clients.html", context)


@account_page
@require_POST
def mcp_activate(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    services.mcp_activate(user=request.user)
    messages.success(request, "MCP is active. You can now create API keys.")
    return redirect("accounts:account")


@account_page
@require_POST
def api_key_create(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    form = ApiKeyCreateForm(request.POST)
    if not form.is_valid():
        return render(request, "accounts/account.html", _keys_context(request.user, form=form))
    try:
        issued = services.api_key_create(
            user=request.user, name=form.cleaned_data["name"], write=form.cleaned_data["write"]
        )
    except services.AccountError as error:
        form.add_error(None, error.message)
        return render(request, "accounts/account.html", _keys_context(request.user, form=form))
    # Post/redirect/get: a reload cannot create a second key. The plaintext rides to the next GET in a signed,
    # short-lived cookie (never in the database) and is dropped there.
    response = redirect("accounts:account")
    response.status_code = 303
    response.set_signed_cookie(
        NEW_KEY_COOKIE,
        issued.plaintext,
        salt=NEW_KEY_SALT,
        max_age=300,
        path=reverse("accounts:account"),
        secure=request.is_secure(),
        httponly=True,
        samesite="Strict",
    )
    return response


@account_page
@require_POST
def api_key_revoke(request: HttpRequest, number: int) -> HttpResponse:
    assert isinstance(request.user, User)
    try:
        revoked = services.api_key_revoke(user=request.user, number=number)
    except services.AccountError as error:
        messages.error(request, error.message)
        return redirect("accounts:account")
    messages.success(request, f"Revoked {revoked.name}.")
    return redirect("accounts:account")
