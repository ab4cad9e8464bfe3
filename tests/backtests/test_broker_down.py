"""A job the broker does not take (Redis down): it fails at once, nothing is charged or held, and the caller gets
the retryable queue_unavailable refusal, where the job once stayed PENDING for ever, its credits held, and the
caller got a bare error."""

import pytest

from backtests import services
from backtests.models import DryRun, Optimization, OptimizationRun, ProbeCut, Report, Status
from billing.selectors import credit_usage
from leroy.errors import DomainError
from tests.backtests.conftest import SMA_CROSS
from tests.backtests.test_services import dry_run, optimization, saved, submit
from tests.conftest import sending_to

REFUSAL = "The job queue did not take the {}: it was stopped and the credits it held were returned; retry shortly."


def test_a_backtest_the_broker_does_not_take_fails_at_once_and_holds_nothing(
    owner, coin, broker_down, django_capture_on_commit_callbacks
):
    with pytest.raises(DomainError) as refused:
        submit(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    report = Report.objects.get()
    assert refused.value.payload() == {
        "error": {
            "code": "queue_unavailable",
            "message": REFUSAL.format("backtest"),
            "retry_after_seconds": 5,
            "report_id": str(report.pk),
        }
    }
    assert report.status == Status.FAILED
    assert report.error == services.NOT_QUEUED
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_an_optimization_the_broker_does_not_take_fails_every_point_and_holds_nothing(
    owner, coin, broker_down, django_capture_on_commit_callbacks
):
    with pytest.raises(DomainError) as refused:
        optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    result = Optimization.objects.get()
    assert refused.value.code == "queue_unavailable"
    assert refused.value.details == {"retry_after_seconds": 5, "optimization_id": str(result.pk)}
    assert result.status == Status.FAILED
    assert result.failed_iterations == result.total_iterations == 6
    assert result.credits_charged == 0
    assert set(OptimizationRun.objects.values_list("status", flat=True)) == {Status.FAILED}
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_a_dry_run_the_broker_does_not_take_fails_at_once(owner, broker_down, django_capture_on_commit_callbacks):
    with pytest.raises(DomainError) as refused:
        dry_run(owner, SMA_CROSS, django_capture_on_commit_callbacks)

    assert refused.value.payload()["error"]["message"] == REFUSAL.format("dry run")
    assert DryRun.objects.get().status == Status.FAILED
    assert DryRun.objects.get().outcome["error"] == services.NOT_QUEUED


def test_probe_cuts_the_broker_does_not_take_fail_and_the_optimization_still_closes(
    owner, coin, coin_apart, django_capture_on_commit_callbacks, dead_redis_url
):
    apart = [str(coin.pk), str(coin_apart.pk)]  # datas with different bar times: a probe of cut runs
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False, data_ids=apart)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):
        services.optimization_points_execute(run_ids=runs[:-1], claim="first")
    with sending_to(dead_redis_url), django_capture_on_commit_callbacks(execute=True):  # the last point: the probe
        services.optimization_points_execute(run_ids=runs[-1:], claim="last")

    result.refresh_from_db()
    cuts = ProbeCut.objects.filter(optimization=result).order_by("index")
    assert result.status == Status.COMPLETED
    assert [cut.status for cut in cuts] == [Status.FAILED, Status.FAILED, Status.COMPLETED]
    assert [cut.error for cut in cuts][:2] == [services.NOT_QUEUED, services.NOT_QUEUED]
    assert result.lookahead_check["status"] == "not_run"
