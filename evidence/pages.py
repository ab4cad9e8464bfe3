"""The research journal page: the account's hypotheses and the outcome of each one's latest review."""

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import User
from accounts.views import account_page
from evidence.models import ResearchHypothesis

PER_PAGE = 50


def hypotheses_of(*, user: User) -> QuerySet[ResearchHypothesis]:
    return ResearchHypothesis.objects.filter(user=user).order_by("-recorded_at", "-pk")


@account_page
def journal(request: HttpRequest) -> HttpResponse:
    assert isinstance(request.user, User)
    hypotheses = Paginator(hypotheses_of(user=request.user), PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "evidence/journal.html", {"hypotheses": hypotheses})
