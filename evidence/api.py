"""The evidence REST mirror: the MCP tools' schemas and service functions behind django-ninja routes.

Each tool is a POST taking its Args model as the JSON body (typed horizons and sides stay typed, unlike a query
string); only the public lineage is a GET.
"""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja import Router

from accounts.models import User
from evidence.research import analysis as research
from evidence.research import evaluation, journal
from evidence.schemas import (
    AnaloguesOut,
    BenchmarkOut,
    EvaluateArgs,
    EvaluationOut,
    ExecutionArgs,
    ExecutionOut,
    ExitPolicyArgs,
    ExitPolicyOut,
    FailureOut,
    HypothesisOut,
    LeadersArgs,
    LeadersOut,
    LineageOut,
    RecordHypothesisArgs,
    RegimeArgs,
    RegimeOut,
    ReviewOut,
    SearchArgs,
    SearchOut,
    SetupArgs,
)
from leroy.api import ERROR_STATUSES, ErrorOut, refuse_bearer
from leroy.errors import DomainError

router = Router(tags=["evidence"])
STATUSES = {
    "not_found": 404,
    "unknown_symbol": 404,
    "idempotency_conflict": 409,
    "quota_exhausted": 402,
    "evidence_unavailable": 503,
}


def _answer(work: Callable[[], Any]) -> Any:
    """Run one service call; a domain refusal becomes the status and `error.code` the MCP tool gives in band."""
    try:
        return work()
    except DomainError as error:
        return STATUSES.get(error.code, 400), {"error": {"code": error.code, "message": error.message}}


def _user(request: HttpRequest) -> User:
    user = request.auth  # type: ignore[attr-defined]
    assert isinstance(user, User)
    return user


def _responses(output: type) -> dict[Any, type]:
    return {200: output, ERROR_STATUSES: ErrorOut}


@router.post("/evaluate", response=_responses(EvaluationOut))
def evaluate(request: HttpRequest, args: EvaluateArgs) -> Any:
    """evaluate_current_setup: 1 lookup (both sides 2, a cache hit 0)."""
    return _answer(lambda: evaluation.evaluate_current_setup(user=_user(request), args=args))


@router.post("/leaders", response=_responses(LeadersOut))
def leaders(request: HttpRequest, args: LeadersArgs) -> Any:
    """get_current_confluence_leaders: 1 lookup per snapshot."""
    return _answer(lambda: research.confluence_leaders(user=_user(request), args=args))


@router.post("/search", response=_responses(SearchOut))
def search(request: HttpRequest, args: SearchArgs) -> Any:
    """search_market_memory: 1 lookup."""
    return _answer(lambda: research.market_memory_search(user=_user(request), args=args))


@router.post("/analogues", response=_responses(AnaloguesOut))
def analogues(request: HttpRequest, args: SetupArgs) -> Any:
    """compare_historical_analogues: 1 lookup."""
    return _answer(lambda: research.historical_analogues(user=_user(request), args=args))


@router.post("/failure", response=_responses(FailureOut))
def failure(request: HttpRequest, args: SetupArgs) -> Any:
    """explain_setup_failure: 1 lookup."""
    return _answer(lambda: research.setup_failure(user=_user(request), args=args))


@router.post("/benchmark", response=_responses(BenchmarkOut))
def benchmark(request: HttpRequest, args: SetupArgs) -> Any:
    """compare_against_benchmark: 1 lookup."""
    return _answer(lambda: research.benchmark_comparison(user=_user(request), args=args))


@router.post("/exit-policy", response=_responses(ExitPolicyOut))
def exit_policy(request: HttpRequest, args: ExitPolicyArgs) -> Any:
    """simulate_exit_policy: 1 lookup."""
    return _answer(lambda: research.exit_policy_simulation(user=_user(request), args=args))


@router.post("/regime", response=_responses(RegimeOut))
def regime(request: HttpRequest, args: RegimeArgs) -> Any:
    """get_market_regime: free."""
    return _answer(lambda: research.market_regime(args=args))


@router.post("/execution-conditions", response=_responses(ExecutionOut))
def execution_conditions(request: HttpRequest, args: ExecutionArgs) -> Any:
    """estimate_execution_conditions: free."""
    return _answer(lambda: research.execution_conditions(args=args))


@router.get("/lineage", response=_responses(LineageOut), auth=None)
def lineage(request: HttpRequest) -> Any:
    """get_data_lineage: free and public (a presented API key or token is still refused)."""
    refuse_bearer(request)
    return _answer(research.data_lineage)


@router.post("/journal", response=_responses(HypothesisOut))
def record_hypothesis(request: HttpRequest, args: RecordHypothesisArgs) -> Any:
    """record_research_hypothesis: a note in your own journal."""
    return _answer(lambda: journal.hypothesis_record(user=_user(request), args=args))


@router.post("/journal/{hypothesis_id}/review", response=_responses(ReviewOut))
def review_hypothesis(request: HttpRequest, hypothesis_id: int) -> Any:
    """review_hypothesis_outcome: one of your own hypotheses against verified bars."""
    return _answer(lambda: journal.hypothesis_review(user=_user(request), hypothesis_id=hypothesis_id))
