"""The research journal (the account's hypotheses and their latest reviews) and the public publication-log page."""

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from accounts.models import User
from accounts.views import account_page
from evidence.models import ResearchHypothesis
from evidence.publication import selectors as log_selectors
from leroy.errors import DomainError

PER_PAGE = 50
LOG_ENTRIES_SHOWN = 20


def hypotheses_of(*, user: User) -> QuerySet[ResearchHypothesis]:
    return ResearchHypothesis.objects.filter(user=user).order_by("-recorded_at", "-pk")


@require_safe
@account_page
def journal(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    hypotheses = Paginator(hypotheses_of(user=request.user), PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "evidence/journal.html", {"hypotheses": hypotheses})


@require_safe
def publication_log(request: HttpRequest) -> HttpResponse:
    """The log's latest signed checkpoint, its newest entries and how to check all of it offline with leroy-verify;
    a 503 saying what to set while this server's key cannot serve the checkpoint or its key."""
    try:
        checkpoint = log_selectors.checkpoint()
    except DomainError as refusal:
        unavailable = {"message": refusal.message}
        return render(request, "evidence/publication_log_unavailable.html", unavailable, status=503)
    context = {
        "checkpoint": checkpoint,
        "entries": log_selectors.recent_entries(limit=LOG_ENTRIES_SHOWN),
        "origin": settings.LEROY_PUBLIC_ORIGIN,
    }
    return render(request, "evidence/publication_log.html", context)
