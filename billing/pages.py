"""The account's Usage and Plan-and-billing pages, the two buttons that hand over to Stripe, and closing the
account (here, where a live subscription is known: it must end first)."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from stripe import StripeError

from accounts import services as accounts
from accounts.forms import AccountCloseForm
from accounts.models import User
from accounts.views import account_page, password_form_judged
from billing import payments, selectors
from billing.models import Plan
from leroy.charts import bar_chart

NOTICE_SHARE = 0.8


@require_safe
@account_page
def usage(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    figures = selectors.usage_page(user=request.user)
    context = {
        **figures,
        "chart": bar_chart(figures["daily"]),
        "notice": figures["included_lookups"] and figures["share_used"] >= NOTICE_SHARE,
        "percent_used": round(figures["share_used"] * 100),
    }
    return render(request, "billing/usage.html", context)


@require_safe
@account_page
def plan(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    current = selectors.plan_of(user=request.user)
    month = selectors.month_terms(user=request.user)
    stripe_on = bool(settings.LEROY_STRIPE_SECRET_KEY)
    context = {
        "plan": current,
        "month": month,
        "month_overage_usd": selectors.micros_to_usd(month.overage_micros_per_lookup),
        "plans": selectors.plan_rows(),
        "overage_usd": selectors.micros_to_usd(current.overage_micros_per_lookup),
        "stripe_on": stripe_on,
        "subscription": selectors.stripe_subscription(user=request.user) if stripe_on else None,
        "usage": selectors.lookup_usage(user=request.user),
        "credits": selectors.credit_usage(user=request.user),
        "statement": selectors.ledger_statement(user=request.user),
        "credit_history": selectors.credit_history(user=request.user),
    }
    return render(request, "billing/plan.html", context)


def _return_url() -> str:
    return settings.LEROY_PUBLIC_ORIGIN + reverse("billing:plan")


@account_page
@require_POST
def checkout(request: HttpRequest, code: str) -> HttpResponse:
    assert isinstance(request.user, User)
    chosen = get_object_or_404(Plan, code=code)
    client = payments.stripe_client()
    if client is None or not chosen.stripe_flat_price_id:
        messages.error(request, "This plan cannot be bought online here.")
        return redirect("billing:plan")
    try:
        url = payments.stripe_checkout_url(user=request.user, plan=chosen, client=client, return_url=_return_url())
    except StripeError:
        messages.error(request, "Stripe is not answering; nothing was charged. Try again in a minute.")
        return redirect("billing:plan")
    return HttpResponseRedirect(url, status=303)


@account_page
@require_POST
def portal(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    client = payments.stripe_client()
    if client is None:
        messages.error(request, "Billing is ledger-only on this installation.")
        return redirect("billing:plan")
    try:
        url = payments.stripe_portal_url(user=request.user, client=client, return_url=_return_url())
    except StripeError:
        messages.error(request, "Stripe is not answering. Try again in a minute.")
        return redirect("billing:plan")
    return HttpResponseRedirect(url, status=303)


@require_http_methods(["GET", "HEAD", "POST"])
@account_page
def close(request: HttpRequest) -> HttpResponse:
    """Close the account for good (accounts.services.account_close), given its password and a typed confirmation;
    refused while a Stripe subscription has not ended: past due, unpaid or incomplete ones can still be paid and
    become active again, billing a closed account."""
    assert isinstance(request.user, User)
    user, template = request.user, "billing/close.html"
    subscription = selectors.stripe_subscription(user=user)
    live = subscription is not None and subscription.subscription_unended
    form = AccountCloseForm(user, request.POST or None)
    context = {"form": form, "live_subscription": live, "credits": selectors.credit_usage(user=user)}
    if request.method == "POST" and not live:
        if locked := password_form_judged(request, form):
            return render(request, template, {**context, "form": AccountCloseForm(user), "locked": locked}, status=429)
        if form.is_valid():
            accounts.account_close(user=user)
            logout(request)
            messages.success(request, "Your account is closed. Its keys and connections no longer work.")
            return redirect("home")
    return render(request, template, context, status=409 if request.method == "POST" and live else 200)
