from django.urls import path

from billing.views import FinanceLedgerView, stripe_webhook

app_name = "billing"

urlpatterns = [
    path("api/finance/ledger", FinanceLedgerView.as_view(), name="finance-ledger"),
    path("billing/stripe/webhook", stripe_webhook, name="stripe-webhook"),
]
