from django.urls import path

from billing.views import FinanceLedgerView

app_name = "billing"

urlpatterns = [
    path("api/finance/ledger", FinanceLedgerView.as_view(), name="finance-ledger"),
]
