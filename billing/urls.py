from django.urls import path

from billing import pages
from billing.views import FinanceLedgerView, stripe_webhook

app_name = "billing"

urlpatterns = [
    path("api/finance/ledger", FinanceLedgerView.as_view(), name="finance-ledger"),
    path("billing/stripe/webhook", stripe_webhook, name="stripe-webhook"),
    path("account/usage/", pages.usage, name="usage"),
    path("account/billing/", pages.plan, name="plan"),
    path("account/billing/checkout/<slug:code>/", pages.checkout, name="checkout"),
    path("account/billing/portal/", pages.portal, name="portal"),
]
