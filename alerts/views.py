"""The Alerts account page: rules, their status and last delivery, the delivery log; the secret is shown once."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from accounts.models import User
from accounts.views import account_page
from alerts import selectors, services, signing
from alerts.forms import AlertCreateForm
from alerts.models import AlertRule
from leroy.errors import DomainError

ACTIONS = ("pause", "resume", "delete", "test", "rotate")
NEW_SECRET_COOKIE = "leroy_new_alert_secret"  # noqa: S105  (a cookie name, not a secret)
NEW_SECRET_SALT = "alerts.new-secret"  # noqa: S105  (a signing salt name)


def _page(request: HttpRequest, user: User, **extra: object) -> HttpResponse:
    rules = list(selectors.rule_list(user=user))
    context = {
        "rules": [(rule, selectors.last_delivery(rule=rule)) for rule in rules],
        "deliveries": selectors.delivery_list(user=user, limit=20),
        "form": AlertCreateForm(),
        **extra,
    }
    return render(request, "alerts/alerts.html", context)  # account_page: never stored


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User)
    return request.user


def _shown_once(request: HttpRequest, rule: AlertRule, secret: str) -> HttpResponse:
    """Post/redirect/get: a reload cannot create a second rule or roll the secret again. The secret rides to the
    next GET in a signed, short-lived cookie (the database holds only its ciphertext) and is dropped there."""
    response = redirect("alerts:alerts")
    response.status_code = 303
    response.set_signed_cookie(
        NEW_SECRET_COOKIE, f"{rule.public_id}:{secret}", salt=NEW_SECRET_SALT, max_age=300,
        path=reverse("alerts:alerts"), secure=request.is_secure(), httponly=True, samesite="Strict",
    )  # fmt: skip
    return response


def _new_secret(request: HttpRequest, user: User) -> tuple[AlertRule, str] | None:
    """The secret made just before this redirect, if its rule is this user's and it is still the rule's secret."""
    value = request.get_signed_cookie(NEW_SECRET_COOKIE, default=None, salt=NEW_SECRET_SALT, max_age=300)
    alert_id, _, secret = (value or "").partition(":")
    rule = selectors.rule_get(user=user, alert_id=alert_id) if secret else None
    if rule is None or signing.secret_decrypt(rule.secret_ciphertext) != secret:
        return None
    return rule, secret


@require_safe
@account_page
def alerts(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    new = _new_secret(request, user)
    response = _page(request, user) if new is None else _page(request, user, secret_rule=new[0], secret=new[1])
    response.delete_cookie(NEW_SECRET_COOKIE, path=reverse("alerts:alerts"))
    return response


@account_page
@require_POST
def alert_create(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    form = AlertCreateForm(request.POST)
    if not form.is_valid():
        return _page(request, user, form=form)
    data = form.cleaned_data
    try:
        rule, secret = services.rule_create(
            user=user,
            name=data["name"],
            symbols=data["symbols"] or None,
            universe=data["universe"],
            side=data["side"],
            horizon_minutes=data["horizon_minutes"],
            min_active_signals=data["min_active_signals"],
            min_match_tier=data["min_match_tier"],
            min_win_rate=data["min_win_rate"],
            min_average_return_pct=data["min_average_return_pct"],
            endpoint_url=data["endpoint_url"],
            expires_at=data["expires_at"],
        )
    except DomainError as refused:
        form.add_error(None, refused.message)
        return _page(request, user, form=form)
    return _shown_once(request, rule, secret)


def _act(request: HttpRequest, alert_id: str, action: str) -> HttpResponse:
    user = _user(request)
    try:
        if action == "rotate":
            rule, secret = services.secret_rotate(user=user, alert_id=alert_id)
            return _shown_once(request, rule, secret)
        if action == "pause":
            services.rule_pause(user=user, alert_id=alert_id)
        elif action == "resume":
            services.rule_resume(user=user, alert_id=alert_id)
        elif action == "delete":
            services.rule_delete(user=user, alert_id=alert_id)
        elif action == "test":
            delivery = services.send_test_event(user=user, alert_id=alert_id)
            messages.info(request, f"Test delivery {delivery.public_id}: {delivery.status} {delivery.last_error}")
    except DomainError as refused:
        messages.error(request, refused.message)
    return redirect("alerts:alerts")


@account_page
@require_POST
def alert_action(request: HttpRequest, alert_id: str, action: str) -> HttpResponse:
    return _act(request, alert_id, action)


@account_page
@require_POST
def delivery_redeliver(request: HttpRequest, delivery_id: str) -> HttpResponse:
    try:
        delivery = services.redeliver(user=_user(request), delivery_id=delivery_id)
        messages.info(request, f"Redelivered {delivery.public_id}: {delivery.status} {delivery.last_error}")
    except DomainError as refused:
        messages.error(request, refused.message)
    return redirect("alerts:alerts")
