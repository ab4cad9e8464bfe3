"""Finance API (DRF): the month's ledger entries as paginated JSON or CSV, for finance staff; the Stripe webhook."""

import csv
import io
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import exports, payments


class CSVRenderer(BaseRenderer):
    """The page's rows in the export's column order; an error renders as a one-cell `detail` CSV."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        buffer = io.StringIO()
        if isinstance(data, dict) and "results" in data:
            exports.write_csv(data["results"], buffer)
        else:
            writer = csv.writer(buffer, lineterminator="\r\n")
            writer.writerows([["detail"], [exports.escape(_detail(data))]])
        return buffer.getvalue().encode()


def _detail(data: Any) -> str:
    """An error's text: DRF's `detail`, or each invalid field's messages (never a Python repr)."""
    if not isinstance(data, dict):
        return str(data)
    if "detail" in data:
        return str(data["detail"])
    return "; ".join(
        f"{field}: {' '.join(str(m) for m in (errors if isinstance(errors, list) else [errors]))}"
        for field, errors in data.items()
    )


class FinanceStaff(BasePermission):
    """Staff allowed to read the ledger (`billing.view_transfer`, as its admin requires; superusers have it)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_active and user.is_staff and user.has_perm("billing.view_transfer"))


class LedgerPagination(PageNumberPagination):
    page_size = 500
    page_size_query_param = "page_size"
    max_page_size = 5000


class FinanceLedgerView(APIView):
    """GET /api/finance/ledger?month=YYYY-MM[&page=N][&format=csv]"""

    authentication_classes = [SessionAuthentication]
    permission_classes = [FinanceStaff]
    renderer_classes = [JSONRenderer, CSVRenderer]

    def get(self, request: Request) -> Response:
        try:
            start = exports.month_start(request.query_params.get("month", ""))
        except ValueError as error:
            raise ValidationError({"month": [str(error)]}) from error
        paginator = LedgerPagination()
        page = paginator.paginate_queryset(exports.ledger_entries(start), request, view=self)
        assert page is not None
        return paginator.get_paginated_response(list(exports.ledger_rows(page)))


@csrf_exempt  # authenticated by the Stripe-Signature HMAC instead
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    try:
        event_id, duplicate = payments.stripe_event_receive(
            payload=request.body, signature=request.headers.get("Stripe-Signature", "")
        )
    except payments.WebhookRefused as refused:
        return JsonResponse({"error": refused.error, "message": str(refused)}, status=400)
    return JsonResponse({"received": event_id, "duplicate": duplicate})
