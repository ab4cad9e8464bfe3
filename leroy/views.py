"""The public landing page."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from billing import selectors as billing_selectors


@require_safe
def landing(request: HttpRequest) -> HttpResponse:
    context = {
        "plans": billing_selectors.plan_rows(),
        "mcp_url": settings.LEROY_PUBLIC_ORIGIN + settings.LEROY_MCP_PATH,
        "origin": settings.LEROY_PUBLIC_ORIGIN,
    }
    return render(request, "landing.html", context)
