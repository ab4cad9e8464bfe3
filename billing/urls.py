from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.vary import vary_on_cookie

from billing import pages
from billing.views import FinanceLedgerView, stripe_webhook

app_name = "billing"

urlpatterns = [
    # The ledger is for the signed-in staff member alone: never stored by a cache, as the account pages are not.
    # Every answer varies on the session cookie, a refusal decided before the session is read (a format the view
    # does not render) included.
    path("api/finance/ledger", never_cache(vary_on_cookie(FinanceLedgerView.as_view())), name="finance-ledger"),
    path("billing/stripe/webhook", stripe_webhook, name="stripe-webhook"),
    path("account/usage/", pages.usage, name="usage"),
    path("account/billing/", pages.plan, name="plan"),
    path("account/billing/checkout/<slug:code>/", pages.checkout, name="checkout"),
    path("account/billing/portal/", pages.portal, name="portal"),
    path("account/billing/close/", pages.close, name="close"),
]
