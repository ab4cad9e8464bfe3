from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts import oauth, selectors, services
from accounts.forms import ApiKeyCreateForm, EmailAuthenticationForm, SignupForm
from accounts.models import User


def _next_on_site(request: HttpRequest) -> str:
    """The `next` page to continue to (e.g. an OAuth consent page), only if it is on this site."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    on_site = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if on_site else ""


def signup(request: HttpRequest) -> HttpResponse:
    next_url = _next_on_site(request)
    if request.user.is_authenticated:
        return redirect(next_url or "accounts:account")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = services.user_create(email=form.cleaned_data["email"], password=form.cleaned_data["password"])
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect(next_url or "accounts:account")
    return render(request, "accounts/signup.html", {"form": form, "next": next_url})


class EmailLoginView(LoginView):
    template_name = "accounts/login.html"
    authentication_form = EmailAuthenticationForm
    redirect_authenticated_user = True


def _account_context(user: User, **extra: object) -> dict[str, object]:
    return {
        "keys": selectors.api_key_list(user=user),
        "active_count": selectors.api_key_active_count(user=user),
        "oauth_clients": oauth.oauth_connected_clients(user=user),
        "form": ApiKeyCreateForm(),
        **extra,
    }


@login_required
def account(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    return render(request, "accounts/account.html", _account_context(request.user))


@login_required
@require_POST
def mcp_activate(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    services.mcp_activate(user=request.user)
    messages.success(request, "MCP is active. You can now create API keys.")
    return redirect("accounts:account")


@login_required
@require_POST
def api_key_create(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    form = ApiKeyCreateForm(request.POST)
    if not form.is_valid():
        return render(request, "accounts/account.html", _account_context(request.user, form=form), status=400)
    try:
        issued = services.api_key_create(
            user=request.user, name=form.cleaned_data["name"], write=form.cleaned_data["write"]
        )
    except services.AccountError as error:
        form.add_error(None, error.message)
        return render(request, "accounts/account.html", _account_context(request.user, form=form), status=400)
    # The plaintext is rendered in this response only; it is never stored or shown again.
    response = render(request, "accounts/account.html", _account_context(request.user, issued=issued), status=201)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def api_key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    assert isinstance(request.user, User)
    try:
        revoked = services.api_key_revoke(user=request.user, key_id=key_id)
    except services.AccountError as error:
        messages.error(request, error.message)
        return redirect("accounts:account")
    messages.success(request, f"Revoked {revoked.name}.")
    return redirect("accounts:account")
