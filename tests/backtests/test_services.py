import hashlib
import threading
from collections import OrderedDict
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.conf import settings

from backtests import probing, sandbox, selectors, series, services, tasks
from backtests.models import DryRunPass, Optimization, OptimizationRun, ProbeCut, Report, Status, Strategy
from backtests.schemas import MarketDataSampleArgs
from backtests.services import BacktestError
from billing.models import Transfer
from billing.selectors import credit_usage
from evidence.marketdata.selectors import bars_frame_version, bars_read
from evidence.models import Symbol
from leroy.clock import now
from tests.backtests.conftest import SMA_CROSS, expected_layers
from tests.calls import call_tool
from tests.migrating import migrate_forward, model_before

pytestmark = pytest.mark.django_db

SIM = {"initial_cash": 100_000.0, "commission": 0.0, "leverage": 1.0, "buy_on_close": False}
OPT_SIM = {"initial_cash": 100_000.0, "commission_schema": {"commission": 0.0, "leverage": 1.0}, "buy_on_close": False}


def saved(owner, code: str = SMA_CROSS) -> Strategy:
    DryRunPass.objects.create(user=owner, code_sha256=services.code_sha256(code), created_at=now())
    return services.strategy_create(user=owner, name="SMA", code=code)


def submit(owner, strategy, coin, capture, **overrides):
    kwargs = (
        dict(
            user=owner,
            strategy_id=str(strategy.pk),
            data_ids=[str(coin.pk)],
            frequency="1d",
            start_date=date(2024, 1, 1),
            end_date=date(2024, 12, 31),
            parameters={},
            simulation=SIM,
        )
        | overrides
    )
    with capture(execute=True):
        report = services.backtest_submit(**kwargs)
    report.refresh_from_db()
    return report


def dry_run(owner, code, capture):
    """Submit a dry run; on commit it is enqueued, and the test settings run Celery eagerly."""
    with capture(execute=True):
        run = services.dry_run_submit(user=owner, code=code)
    return services.dry_run_state(run_id=run.pk).outcome


def test_dry_run_records_a_pass_and_saves_no_strategy(owner, django_capture_on_commit_callbacks):
    outcome = dry_run(owner, SMA_CROSS, django_capture_on_commit_callbacks)

    assert outcome["success"] is True
    assert outcome["result"]["bars"] == {"DRYA": 260, "DRYB": 260}
    assert set(outcome["result"]["statistics"]) == set(services.statistics.METRICS)
    assert Strategy.objects.exists() is False
    assert DryRunPass.objects.filter(user=owner, code_sha256=services.code_sha256(SMA_CROSS)).count() == 1


def test_failed_dry_run_reports_the_error_and_records_nothing(owner, django_capture_on_commit_callbacks):
    code = "class X(bt.Strategy):\n    def next(self):\n        1 / 0\n"
    outcome = dry_run(owner, code, django_capture_on_commit_callbacks)

    assert outcome["success"] is False
    assert outcome["error"] == {"code": "execution_error", "message": "ZeroDivisionError: division by zero", "line": 3}
    assert DryRunPass.objects.exists() is False


def test_create_requires_a_dry_run_of_the_exact_code(owner):
    with pytest.raises(services.BacktestError) as caught:
        services.strategy_create(user=owner, name="SMA", code=SMA_CROSS)

    assert caught.value.code == "dry_run_required"
    assert Strategy.objects.exists() is False


def test_update_creates_an_immutable_version_and_keeps_history(owner):
    first = saved(owner)

    second = services.strategy_update(user=owner, strategy_id=str(first.pk), name="SMA v2")

    first.refresh_from_db()
    assert (first.is_current, second.is_current) == (False, True)
    assert (second.lineage, second.revision, second.previous_id) == (first.lineage, 2, first.pk)
    assert (first.name, first.code) == ("SMA", SMA_CROSS)
    assert second.code == SMA_CROSS
    with pytest.raises(services.BacktestError) as caught:
        services.strategy_update(user=owner, strategy_id=str(first.pk), name="stale")
    assert caught.value.code == "strategy_superseded"
    assert caught.value.details == {"current_id": str(second.pk)}
    assert Strategy.objects.count() == 2


def test_update_with_new_code_requires_its_dry_run(owner):
    first = saved(owner)

    with pytest.raises(services.BacktestError) as caught:
        services.strategy_update(user=owner, strategy_id=str(first.pk), code=SMA_CROSS + "\n# changed\n")

    assert caught.value.code == "dry_run_required"
    assert Strategy.objects.count() == 1


def test_backtest_completes_settles_credits_and_is_deterministic(owner, coin, django_capture_on_commit_callbacks):
    strategy = saved(owner)

    first = submit(owner, strategy, coin, django_capture_on_commit_callbacks)
    second = submit(owner, strategy, coin, django_capture_on_commit_callbacks)

    assert first.status == Status.COMPLETED
    assert first.error is None
    assert len(first.trades) >= 1
    assert first.statistics["realized_pnl"] == pytest.approx(sum(t["total"] for t in first.trades))
    assert first.diagnostics["sandbox_layers"] == expected_layers()
    assert len(first.data_version) == 64
    assert (second.data_version, second.trades, second.statistics) == (
        first.data_version, first.trades, first.statistics
    )  # fmt: skip
    # The second run is a second trial of the strategy: its verdict, and so its hash, deflate by both.
    assert (first.verdict["deflated_sharpe"]["trials"], second.verdict["deflated_sharpe"]["trials"]) == (1, 2)
    assert second.report_hash != first.report_hash
    assert first.credits_charged == 15  # 10 for the backtest, 5 for its look-ahead probe
    assert (first.lookahead_check["status"], first.lookahead_check["method"]) == ("passed", "streamed")
    usage = credit_usage(user=owner)
    assert (usage["credits_consumed"], usage["credits_remaining"]) == (30, 970)


def test_failing_strategy_fails_the_report_and_voids_credits(owner, coin, django_capture_on_commit_callbacks):
    code = "class Boom(bt.Strategy):\n    def next(self):\n        x = 1 / 0\n"
    strategy = saved(owner, code)

    report = submit(owner, strategy, coin, django_capture_on_commit_callbacks)

    assert report.status == Status.FAILED
    assert report.error["code"] == "execution_error"
    assert report.error["line"] == 3
    assert report.statistics is None
    usage = credit_usage(user=owner)
    assert (usage["credits_consumed"], usage["credits_remaining"]) == (0, 1000)


def test_undeclared_parameter_is_refused_at_submission_without_charge(owner, coin, django_capture_on_commit_callbacks):
    with pytest.raises(services.BacktestError) as caught:
        submit(owner, saved(owner), coin, django_capture_on_commit_callbacks, parameters={"nope": 3})

    assert caught.value.code == "unknown_parameter"
    assert caught.value.details == {"unknown": ["nope"]}
    assert Report.objects.exists() is False
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_parameters_the_code_hides_from_static_reading_fail_the_run(owner, coin, django_capture_on_commit_callbacks):
    code = (
        "PARAMS = (('fast', 5),)\n\nclass Dyn(bt.Strategy):\n    params = PARAMS\n\n    def next(self):\n        pass\n"
    )

    report = submit(owner, saved(owner, code), coin, django_capture_on_commit_callbacks, parameters={"nope": 3})

    assert report.status == Status.FAILED
    assert report.error["code"] == "unknown_parameter"
    assert "nope" in report.error["message"]
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_missing_frequency_is_refused_at_submission_without_charge(owner, coin, django_capture_on_commit_callbacks):
    with pytest.raises(services.BacktestError) as caught:
        submit(owner, saved(owner), coin, django_capture_on_commit_callbacks, frequency="1h")

    assert caught.value.code == "frequency_unavailable"
    assert Report.objects.exists() is False
    assert Transfer.objects.filter(reference__startswith="backtest:").exists() is False


def test_insufficient_credits_creates_nothing(owner, coin, settings, django_capture_on_commit_callbacks):
    settings.LEROY_BACKTEST_CREDITS = 5000

    with pytest.raises(services.BacktestError) as caught:
        submit(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    assert caught.value.code == "insufficient_credits"
    assert Report.objects.exists() is False


def test_worker_lost_mid_run_fails_the_report_and_voids_credits(owner, coin, django_capture_on_commit_callbacks):
    # given a report a worker claimed (EXECUTING) and then died in, so the broker redelivers its task
    with django_capture_on_commit_callbacks(execute=False):
        report = services.backtest_submit(
            user=owner, strategy_id=str(saved(owner).pk), data_ids=[str(coin.pk)], frequency="1d",
            start_date=date(2024, 1, 1), end_date=date(2024, 12, 31), parameters={}, simulation=SIM,
        )  # fmt: skip
    Report.objects.filter(pk=report.pk).update(status=Status.EXECUTING, started_at=now())

    # when the redelivered task runs
    services.backtest_execute(report_id=str(report.pk))

    # then the run fails instead of running twice, and the hold is released
    report.refresh_from_db()
    assert report.status == Status.FAILED
    assert report.error["code"] == "worker_lost"
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_reaper_fails_stale_executing_reports(owner, coin, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        report = services.backtest_submit(
            user=owner, strategy_id=str(saved(owner).pk), data_ids=[str(coin.pk)], frequency="1d",
            start_date=date(2024, 1, 1), end_date=date(2024, 12, 31), parameters={}, simulation=SIM,
        )  # fmt: skip
    Report.objects.filter(pk=report.pk).update(status=Status.EXECUTING, started_at=now())

    assert services.stale_jobs_reap(older_than=timedelta(minutes=5)) == 0
    with time_machine.travel(now() + timedelta(minutes=10)):
        assert services.stale_jobs_reap(older_than=timedelta(minutes=5)) == 1

    report.refresh_from_db()
    assert (report.status, report.error["code"]) == (Status.FAILED, "worker_lost")
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def optimization(owner, strategy, coin, capture, *, execute=True, **overrides):
    kwargs = dict(
        user=owner, strategy_id=str(strategy.pk), name="grid", data_ids=[str(coin.pk)], frequency="1d",
        start=now().replace(year=2024, month=1, day=1), end=now().replace(year=2024, month=12, day=31),
        grids=[{"name": "fast", "min": 3, "max": 5, "step": 1}, {"name": "slow", "min": 10, "max": 20, "step": 10}],
        parameters={"size": 5}, simulation_parameters=OPT_SIM, target_metric="realized_pnl",
        target_direction="maximize", additional_metrics=[], use_free_optimization=False,
    ) | overrides  # fmt: skip
    with capture(execute=execute):
        result = services.optimization_submit(**kwargs)
    result.refresh_from_db()
    return result


def test_grid_over_an_undeclared_parameter_is_refused(owner, coin, django_capture_on_commit_callbacks):
    with pytest.raises(services.BacktestError) as caught:
        optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks,
                     grids=[{"name": "period", "min": 1, "max": 3, "step": 1}])  # fmt: skip

    assert (caught.value.code, caught.value.details) == ("unknown_parameter", {"unknown": ["period"]})
    assert Optimization.objects.exists() is False


def test_grid_points_are_exact_and_keep_integers():
    points = services.grid_points(
        [{"name": "a", "min": 0.1, "max": 0.3, "step": 0.1}, {"name": "b", "min": 1, "max": 2, "step": 1}]
    )

    assert points == [{"a": 0.1, "b": 1}, {"a": 0.1, "b": 2}, {"a": 0.2, "b": 1}, {"a": 0.2, "b": 2},
                      {"a": 0.3, "b": 1}, {"a": 0.3, "b": 2}]  # fmt: skip


def test_optimization_runs_every_point_and_charges_them(owner, coin, django_capture_on_commit_callbacks):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    assert (result.status, result.total_iterations, result.completed_iterations) == (Status.COMPLETED, 6, 6)
    runs = list(OptimizationRun.objects.filter(optimization=result))
    assert [r.parameters for r in runs][:2] == [{"fast": 3, "slow": 10}, {"fast": 3, "slow": 20}]
    assert all(set(r.statistics) == set(services.statistics.METRICS) for r in runs)
    assert result.credits_charged == 36  # 6 points x 5, the best run's look-ahead probe and the grid's PBO
    assert credit_usage(user=owner)["credits_remaining"] == 964
    best = max(runs, key=lambda r: (r.statistics["realized_pnl"], -r.iteration))
    assert result.lookahead_check["status"] == "passed"
    assert (result.lookahead_check["iteration"], result.lookahead_check["parameters"]) == (
        best.iteration,
        best.parameters,
    )


def test_points_are_queued_in_chunks_that_read_their_bars_once_and_tasks_run_one_after_another_take_no_others(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch, settings
):
    settings.LEROY_OPTIMIZATION_POINTS_PER_TASK = 2
    queued, reads = [], []
    monkeypatch.setattr(tasks.optimization_points, "delay", queued.append)
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    real_bars_read = services.bars_read
    monkeypatch.setattr(services, "bars_read", lambda **kwargs: reads.append(kwargs) or real_bars_read(**kwargs))
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list("pk", flat=True))

    for index, chunk in enumerate(queued):  # one worker: each task in turn
        with django_capture_on_commit_callbacks(execute=True):  # the last point queues the probe's other cuts
            services.optimization_points_execute(run_ids=chunk, claim=f"task-{index}")

    result.refresh_from_db()
    assert queued == [runs[:2], runs[2:4], runs[4:]]
    assert (result.point_tasks, result.point_tasks_started) == (3, 3)
    claims = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list(
        "claimed_by", flat=True))  # fmt: skip
    assert claims == ["task-0", "task-0", "task-1", "task-1", "task-2", "task-2"]  # none took another's point
    assert len(reads) == 1  # by the first task: the others, the best run's probe and its cuts read what it kept
    assert (result.status, result.completed_iterations, result.lookahead_check["status"]) == (
        Status.COMPLETED, 6, "passed"
    )  # fmt: skip


def test_once_every_task_has_started_a_task_that_ends_its_chunk_takes_the_unstarted_points_from_the_end(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list("pk", flat=True))
    ran: list[tuple[str, int]] = []
    real_run_point = services._run_point

    def run_point(optimization, run):
        ran.append((OptimizationRun.objects.get(pk=run.pk).claimed_by, run.pk))
        # Three workers: while the first task runs its first point the second starts, and while the second runs
        # its first point the third (the last task to start) starts.
        if run.pk == runs[0]:
            services.optimization_points_execute(run_ids=runs[2:4], claim="second")
        if run.pk == runs[2]:
            services.optimization_points_execute(run_ids=runs[4:], claim="third")
        return real_run_point(optimization, run)

    monkeypatch.setattr(services, "_run_point", run_point)
    with django_capture_on_commit_callbacks(execute=True):  # the last point queues the probe's other cuts
        services.optimization_points_execute(run_ids=runs[:2], claim="first")

    assert sorted(pk for _, pk in ran) == sorted(runs)  # every point once
    # The third ends its chunk with every task started: it takes the second's and the first's unstarted points.
    assert ran == [("first", runs[0]), ("second", runs[2]), ("third", runs[4]), ("third", runs[5]),
                   ("third", runs[3]), ("third", runs[1])]  # fmt: skip
    assert Optimization.objects.get(pk=result.pk).status == Status.COMPLETED


def test_a_redelivered_task_fails_the_point_it_was_running_and_runs_the_rest_but_not_another_tasks_point(
    owner, coin, django_capture_on_commit_callbacks
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list("pk", flat=True))
    # Task a's worker died running the second point; task b is running the fifth (both had started: with this
    # redelivery every one of the three tasks has started, so task a goes on to the unstarted points).
    OptimizationRun.objects.filter(pk=runs[1]).update(status=Status.EXECUTING, claimed_by="task-a", started_at=now())
    OptimizationRun.objects.filter(pk=runs[4]).update(status=Status.EXECUTING, claimed_by="task-b", started_at=now())
    Optimization.objects.filter(pk=result.pk).update(point_tasks_started=2)

    services.optimization_points_execute(run_ids=runs[:2], claim="task-a")  # the broker redelivers task a

    statuses = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list(
        "status", "error", "claimed_by"))  # fmt: skip
    completed = (Status.COMPLETED, None, "task-a")
    assert statuses == [completed, (Status.FAILED, services.WORKER_LOST, "task-a"), completed, completed,
                        (Status.EXECUTING, None, "task-b"), completed]  # fmt: skip
    assert Optimization.objects.get(pk=result.pk).status == Status.EXECUTING  # task b's point is still running


def test_cancel_mid_optimization_stops_the_rest_and_refunds_exactly(owner, coin, django_capture_on_commit_callbacks):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration"))
    assert credit_usage(user=owner)["credits_remaining"] == 964  # 6 points x 5, the probe's 5 and the PBO's 1

    services.optimization_point_execute(run_id=runs[0].pk, claim="task-0")
    services.optimization_point_execute(run_id=runs[1].pk, claim="task-1")
    cancelled = services.optimization_cancel(user=owner, optimization_id=str(result.pk))
    for run in runs[2:]:
        services.optimization_point_execute(run_id=run.pk, claim=f"task-{run.pk}")  # queued, arriving after the cancel

    assert (cancelled.status, cancelled.completed_iterations, cancelled.credits_charged) == (Status.CANCELLED, 2, 10)
    statuses = list(OptimizationRun.objects.filter(optimization=result).values_list("status", flat=True))
    assert statuses == [Status.COMPLETED] * 2 + [Status.CANCELLED] * 4
    usage = credit_usage(user=owner)
    assert (usage["credits_consumed"], usage["credits_remaining"]) == (10, 990)
    with pytest.raises(services.BacktestError) as caught:
        services.optimization_cancel(user=owner, optimization_id=str(result.pk))
    assert caught.value.code == "not_cancellable"


def test_free_optimization_reserves_no_credits(owner, coin, django_capture_on_commit_callbacks):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, use_free_optimization=True)

    assert (result.status, result.credits_reserved, result.credits_charged) == (Status.COMPLETED, 0, 0)
    usage = credit_usage(user=owner)
    assert (usage["credits_remaining"], usage["free_optimizations_remaining"]) == (1000, 0)
    with pytest.raises(services.BacktestError) as caught:
        optimization(
            owner, Strategy.objects.get(), coin, django_capture_on_commit_callbacks, use_free_optimization=True
        )
    assert caught.value.code == "no_free_optimizations"
    assert Optimization.objects.count() == 1


def test_a_free_optimization_that_runs_nothing_gives_its_use_back(owner, coin, django_capture_on_commit_callbacks):
    queued = optimization(
        owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False, use_free_optimization=True
    )
    while_queued = credit_usage(user=owner)["free_optimizations_remaining"]
    services.optimization_cancel(user=owner, optimization_id=str(queued.pk))

    ran = optimization(
        owner, Strategy.objects.get(), coin, django_capture_on_commit_callbacks, use_free_optimization=True
    )

    codes = list(Transfer.objects.filter(code__in=["reserve", "post", "void"]).values_list("code", flat=True))
    assert while_queued == 0  # held while it may run
    assert (ran.status, ran.credits_charged) == (Status.COMPLETED, 0)
    assert credit_usage(user=owner)["free_optimizations_remaining"] == 0  # the one that ran used it
    assert sorted(codes) == ["post", "reserve", "reserve", "void"]


def test_other_accounts_cannot_use_a_strategy(owner, outsider, coin, django_capture_on_commit_callbacks):
    strategy = saved(owner)

    with pytest.raises(services.BacktestError) as caught:
        submit(outsider, strategy, coin, django_capture_on_commit_callbacks)

    assert caught.value.code == "strategy_not_found"
    assert Report.objects.exists() is False


def test_ids_that_are_not_uuids_are_refused_like_unknown_ones_and_change_nothing(
    owner, coin, django_capture_on_commit_callbacks
):
    strategy = saved(owner)
    capture = django_capture_on_commit_callbacks
    refusals = {}
    for name, attempt in {
        "backtest": lambda: submit(owner, strategy, coin, capture, strategy_id="not-a-uuid"),
        "optimization": lambda: optimization(owner, strategy, coin, capture, strategy_id="not-a-uuid"),
        "update": lambda: services.strategy_update(user=owner, strategy_id="not-a-uuid", name="x"),
        "cancel": lambda: services.optimization_cancel(user=owner, optimization_id="not-a-uuid"),
    }.items():
        with pytest.raises(services.BacktestError) as caught:
            attempt()
        refusals[name] = caught.value.code

    assert refusals == {
        "backtest": "strategy_not_found", "optimization": "strategy_not_found", "update": "not_found",
        "cancel": "not_found",
    }  # fmt: skip
    assert (Report.objects.exists(), Optimization.objects.exists(), Strategy.objects.count()) == (False, False, 1)
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_sandbox_child_killed_mid_run_fails_the_report_and_voids_credits(
    owner, coin, monkeypatch, django_capture_on_commit_callbacks
):
    code = "class Spin(bt.Strategy):\n    def next(self):\n        while True:\n            pass\n"
    real_run_job = services.sandbox.run_job

    def run_and_kill(**kwargs):
        kill = lambda running: threading.Timer(1.0, running.kill, args=("worker_shutdown",)).start()  # noqa: E731
        return real_run_job(**kwargs, on_start=kill)

    monkeypatch.setattr(services.sandbox, "run_job", run_and_kill)

    report = submit(owner, saved(owner, code), coin, django_capture_on_commit_callbacks)

    assert report.status == Status.FAILED
    assert report.error == {"code": "killed", "message": "the run was stopped (worker_shutdown)", "line": None}
    assert report.diagnostics["sandbox_layers"] == expected_layers()  # in force when it was killed
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_status_moves_pending_executing_completed(owner, coin, django_capture_on_commit_callbacks, monkeypatch):
    seen = []
    real_run_job = services.sandbox.run_job

    def observe(**kwargs):
        seen.append(Report.objects.get().status)
        return real_run_job(**kwargs)

    monkeypatch.setattr(services.sandbox, "run_job", observe)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = services.backtest_submit(
            user=owner, strategy_id=str(saved(owner).pk), data_ids=[str(coin.pk)], frequency="1d",
            start_date=date(2024, 1, 1), end_date=date(2024, 12, 31), parameters={}, simulation=SIM,
        )  # fmt: skip
    pending = Report.objects.get(pk=report.pk)

    callbacks[0]()

    report.refresh_from_db()
    assert (pending.status, pending.started_at, pending.statistics) == (Status.PENDING, None, None)
    assert seen == [Status.EXECUTING]
    assert report.status == Status.COMPLETED
    assert report.started_at <= report.finished_at
    services.backtest_execute(report_id=str(report.pk))  # a duplicate delivery changes nothing
    assert Report.objects.get(pk=report.pk).report_hash == report.report_hash


def test_bars_are_read_once_per_symbol_and_versioned_as_bars_data_version_gives(coin, other_coin, monkeypatch):
    import hashlib

    from evidence.marketdata import store
    from evidence.marketdata.selectors import bars_data_version

    start, end = services.day_bounds(date(2024, 1, 1), date(2024, 2, 29))
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    scans = []
    real_scan = store.scan_parquet
    monkeypatch.setattr(store, "scan_parquet", lambda paths: scans.append(paths) or real_scan(paths))

    datas, version = services.load_bars(tickers=["TSTUSD", "XAUUSD"], frequency="1d", start=start, end=end, as_of=now())

    assert len(scans) == 2
    assert [d["name"] for d in datas] == ["TSTUSD", "XAUUSD"]
    each = [bars_data_version(symbol=s, frequency="1d", start=start, end=end) for s in (coin, other_coin)]
    assert version == hashlib.sha256("|".join(each).encode()).hexdigest()


def test_a_workers_bars_are_kept_until_a_partition_they_came_from_is_rewritten(coin, monkeypatch):
    from backtests.dryrun import walk
    from evidence.marketdata.importers import bars_import
    from tests.backtests.conftest import frame_of

    start, end = services.day_bounds(date(2024, 1, 1), date(2024, 12, 31))
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    reads = []
    real_bars_read = services.bars_read
    monkeypatch.setattr(services, "bars_read", lambda **kwargs: reads.append(kwargs) or real_bars_read(**kwargs))

    first = services.load_bars(tickers=["TSTUSD"], frequency="1d", start=start, end=end, as_of=now())
    again = services.load_bars(tickers=["TSTUSD"], frequency="1d", start=start, end=end, as_of=now())
    # Ten more days of the same year: the year's partition file is replaced by one with them.
    bars_import(
        ticker="TSTUSD", frequency="1d", frame=frame_of(walk("TSTUSD", bars=130, seed=7)).tail(10), asset_class="crypto"
    )
    extended = services.load_bars(tickers=["TSTUSD"], frequency="1d", start=start, end=end, as_of=now())

    assert len(reads) == 2
    assert again is first
    assert (len(first[0][0]["ts_us"]), len(extended[0][0]["ts_us"])) == (120, 130)
    assert extended[0][0]["ts_us"][:120] == first[0][0]["ts_us"]
    assert extended[1] != first[1]


def test_kept_bars_cost_one_query_a_symbol(coin, other_coin, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    start, end = services.day_bounds(date(2024, 1, 1), date(2024, 12, 31))
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    first = services.load_bars(tickers=["TSTUSD", "XAUUSD"], frequency="1d", start=start, end=end, as_of=now())

    with CaptureQueriesContext(connection) as queries:
        again = services.load_bars(tickers=["TSTUSD", "XAUUSD"], frequency="1d", start=start, end=end, as_of=now())

    assert again is first
    # Each symbol's partitions and their stamps, joined on its ticker: the symbol row itself is not read.
    assert len(queries.captured_queries) == 2
    assert all('FROM "evidence_barpartition" INNER JOIN' in q["sql"] for q in queries.captured_queries)


def test_a_worker_keeps_bars_up_to_its_row_bound_dropping_the_least_recent_window_first(coin, monkeypatch):
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    monkeypatch.setattr(services, "BARS_KEPT_ROWS", 100)
    first, second, large, longer = (
        services.day_bounds(date(2024, 1, 1), date(2024, 1, 1) + timedelta(days=days)) for days in (39, 49, 150, 59)
    )

    def rows(window):
        datas, _ = services.load_bars(tickers=["TSTUSD"], frequency="1d", start=window[0], end=window[1], as_of=now())
        return len(datas[0]["ts_us"])

    assert [rows(first), rows(second), rows(large)] == [29, 35, 108]
    assert [services._rows(kept) for kept in services._BARS_KEPT.values()] == [29, 35]  # 108 rows: not kept
    rows(first)  # used again: now the most recent
    assert rows(longer) == 43
    assert [services._rows(kept) for kept in services._BARS_KEPT.values()] == [29, 43]  # 29 + 35 + 43 > 100


def test_a_window_without_bars_is_refused_as_no_data_and_nothing_is_kept(coin, monkeypatch):
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    start, end = services.day_bounds(date(2030, 1, 1), date(2030, 12, 31))

    with pytest.raises(services.BacktestError) as refused:
        services.load_bars(tickers=["TSTUSD"], frequency="1d", start=start, end=end, as_of=now())

    assert (refused.value.code, refused.value.message) == (
        "no_data", "TSTUSD has no 1d bars between 2030-01-01 and 2030-12-31."
    )  # fmt: skip
    assert services._BARS_KEPT == {}


def test_bars_on_a_store_that_cannot_stamp_its_files_are_read_every_time(coin, monkeypatch):
    from evidence.marketdata import store

    start, end = services.day_bounds(date(2024, 1, 1), date(2024, 12, 31))
    monkeypatch.setattr(services, "_BARS_KEPT", OrderedDict())
    monkeypatch.setattr(store, "stamp", lambda relative: None)  # as on a remote store
    reads = []
    real_bars_read = services.bars_read
    monkeypatch.setattr(services, "bars_read", lambda **kwargs: reads.append(kwargs) or real_bars_read(**kwargs))

    first = services.load_bars(tickers=["TSTUSD"], frequency="1d", start=start, end=end, as_of=now())
    again = services.load_bars(tickers=["TSTUSD"], frequency="1d", start=start, end=end, as_of=now())

    assert len(reads) == 2
    assert again == first
    assert services._BARS_KEPT == {}


def test_a_report_carries_the_probes_failure_and_its_hash_covers_it(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    from tests.backtests.test_lookahead import PRIVATE_FUTURE, RUNTIME_ONLY

    run_job = sandbox.run_job
    # The engine's private bars are out of reach of the in-process layers; without them the probe is what sees it.
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: run_job(**kwargs | {"layers": RUNTIME_ONLY}))
    cheat = submit(owner, saved(owner, PRIVATE_FUTURE), coin, django_capture_on_commit_callbacks)
    honest = submit(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    check = cheat.lookahead_check
    assert (cheat.status, check["status"], check["method"], check["first_difference"]["cut"]) == (
        Status.COMPLETED, "failed", "streamed", None
    )  # fmt: skip
    assert cheat.statistics["percentage_of_winning_trades"] == 100.0  # a perfect-foresight record, flagged
    assert cheat.credits_charged == 15
    assert honest.lookahead_check["status"] == "passed"
    assert cheat.report_hash == services.statistics.report_hash(
        statistics=cheat.statistics,
        result={"trades": cheat.trades, "equity": cheat.equity, "final_value": cheat.diagnostics["final_value"]},
        lookahead_check=check,
        verdict=cheat.verdict,
    )
    assert (cheat.verdict["status"], cheat.verdict["reasons"][0]["code"]) == ("overfit", "lookahead")


def test_a_probe_with_no_decision_to_check_is_not_run_and_not_charged(owner, django_capture_on_commit_callbacks):
    from tests.backtests.conftest import import_walk

    short = import_walk("SHTUSD", bars=30)  # too short for the SMA cross to decide

    report = submit(owner, saved(owner), short, django_capture_on_commit_callbacks)

    assert report.lookahead_check == {
        "status": "not_run", "k": 0, "cuts": [],
        "reason": "the full run took no order decisions, so there are none a rerun could change",
    }  # fmt: skip
    assert (report.credits_reserved, report.credits_charged) == (15, 10)


def test_trials_count_every_run_across_versions_and_copies_of_the_same_code(
    owner, outsider, coin, django_capture_on_commit_callbacks
):
    from backtests.models import Trial

    first = saved(owner)
    submit(owner, first, coin, django_capture_on_commit_callbacks)
    renamed = services.strategy_update(user=owner, strategy_id=str(first.pk), name="SMA renamed")
    submit(owner, renamed, coin, django_capture_on_commit_callbacks)
    # A new strategy (a new lineage) with the same code cannot start the count again: it is counted by code hash.
    copy = services.strategy_create(user=owner, name="SMA copy", code=SMA_CROSS)
    third = submit(owner, copy, coin, django_capture_on_commit_callbacks)
    elsewhere = submit(outsider, saved(outsider), coin, django_capture_on_commit_callbacks)

    assert copy.lineage != first.lineage
    assert third.verdict["deflated_sharpe"]["trials"] == 3
    assert elsewhere.verdict["deflated_sharpe"]["trials"] == 1  # another account's trials are its own
    sharpes = list(Trial.objects.filter(user=owner).values_list("sharpe", flat=True))
    mean = sum(sharpes) / 3
    variance = sum((s - mean) ** 2 for s in sharpes) / 2
    assert third.verdict["deflated_sharpe"]["trial_sharpe_variance"] == pytest.approx(variance)
    trial = Trial.objects.get(report=third)
    assert (trial.kind, trial.data_ids, trial.frequency, trial.data_version) == (
        "backtest", [str(coin.pk)], "1d", third.data_version
    )  # fmt: skip
    assert trial.observations == third.verdict["deflated_sharpe"]["observations"]


def test_an_optimization_counts_every_point_and_carries_a_verdict_with_pbo(
    owner, coin, django_capture_on_commit_callbacks
):
    from backtests.models import Trial

    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    verdict = result.verdict
    assert Trial.objects.filter(user=owner, kind="grid_point").count() == 6
    assert verdict["deflated_sharpe"]["trials"] == 6
    assert (verdict["pbo"]["blocks"], verdict["pbo"]["combinations"], verdict["pbo"]["grid_points"]) == (16, 12870, 6)
    assert 0.0 <= verdict["pbo"]["value"] <= 1.0
    assert verdict["lookahead_check"] == "passed"
    # The grid over a 120-bar random walk overfits (PBO above 0.5), and its runs trade far fewer than 30 times.
    assert verdict["pbo"]["value"] > 0.5
    assert (verdict["status"], [r["code"] for r in verdict["reasons"]][:2]) == ("overfit", ["pbo", "trades"])
    assert len(result.report_hash) == 64
    recomputed, _ = services.optimization_pbo(result)
    assert recomputed == verdict["pbo"]


def test_the_grids_pbo_from_the_points_block_sums_is_the_pbo_of_their_whole_series(
    owner, coin, django_capture_on_commit_callbacks
):
    from backtests import verdicts

    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)
    runs = list(OptimizationRun.objects.filter(optimization=result, status=Status.COMPLETED).order_by("iteration"))
    whole = verdicts.cscv(verdicts.returns_matrix([series.unpack(run.returns) for run in runs]), blocks=16)

    assert len(runs) == 6
    assert all(run.return_blocks["observations"] == len(series.unpack(run.returns)) for run in runs)
    assert verdicts.blocks_align([run.return_blocks for run in runs], 16)
    assert result.verdict["pbo"] == whole  # exactly: the same sums, in the same layout
    # A point without its sums (a row from before they were kept): the whole series are read, with the same PBO.
    OptimizationRun.objects.filter(pk=runs[2].pk).update(return_blocks=None)
    assert services.optimization_pbo(result) == (whole, None)


def test_points_whose_days_differ_are_aligned_on_the_union_of_their_days(
    owner, coin, django_capture_on_commit_callbacks
):
    from backtests import verdicts

    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)
    runs = list(OptimizationRun.objects.filter(optimization=result, status=Status.COMPLETED).order_by("iteration"))
    shorter = series.unpack(runs[0].returns)[1:]  # one point without the first day: its column is 0 there
    OptimizationRun.objects.filter(pk=runs[0].pk).update(
        returns=series.pack(shorter), return_blocks=verdicts.return_blocks(shorter, 16)
    )
    columns = [shorter, *[series.unpack(run.returns) for run in runs[1:]]]

    kept = OptimizationRun.objects.filter(optimization=result, status=Status.COMPLETED).order_by("iteration")
    assert not verdicts.blocks_align(list(kept.values_list("return_blocks", flat=True)), 16)
    assert services.optimization_pbo(result) == (verdicts.cscv(verdicts.returns_matrix(columns), blocks=16), None)


def test_a_grid_too_small_for_cscv_is_refused_in_the_verdict_and_its_credits_refunded(
    owner, coin, django_capture_on_commit_callbacks
):
    one_point = [{"name": "fast", "min": 3, "max": 3, "step": 1}]
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, grids=one_point)

    assert (result.credits_reserved, result.credits_charged) == (11, 10)  # the PBO's 1 credit went back
    assert result.verdict["pbo"] is None
    reason = next(r for r in result.verdict["reasons"] if r["code"] == "pbo_not_computed")
    assert reason["message"] == "The grid has 1 completed point(s); CSCV needs at least 2 to choose between."
    assert credit_usage(user=owner)["credits_remaining"] == 990


PEEKING_GRID = """
class Foresight(bt.Strategy):
    params = (("fast", 3), ("slow", 10), ("size", 1))

    def next(self):
        bars = self.data._bars["close"]
        i = len(self)
        if i < len(bars) and bars[i] > self.data.close[0] and not self.position:
            self.buy(size=self.p.size * self.p.fast)
        elif self.position and i < len(bars) and bars[i] < self.data.close[0]:
            self.close()
"""


def test_the_best_points_probe_streams_its_bars_and_compares_every_decision_with_that_points_record(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    from tests.backtests.test_lookahead import RUNTIME_ONLY

    run_job, jobs = sandbox.run_job, []
    # The engine's private bars are out of reach of the in-process layers; without them the probe is what sees it.
    monkeypatch.setattr(
        sandbox, "run_job", lambda **kwargs: jobs.append(kwargs) or run_job(**kwargs | {"layers": RUNTIME_ONLY})
    )
    result = optimization(owner, saved(owner, PEEKING_GRID), coin, django_capture_on_commit_callbacks)

    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    probes = [job for job in jobs if job.get("probe")]
    assert len(jobs) == 6 + 1 and len(probes) == 1  # 6 points, then one job: the streamed run only
    assert (probes[0]["expected"], probes[0].get("cuts")) == (best.decisions["decisions"], None)
    assert ProbeCut.objects.filter(optimization=result).exists() is False
    assert (result.status, result.lookahead_check["status"], result.lookahead_check["method"]) == (
        Status.COMPLETED, "failed", "streamed"
    )  # fmt: skip
    assert (result.verdict["status"], result.verdict["reasons"][0]["code"]) == ("overfit", "lookahead")


def test_the_best_points_probe_compares_its_cut_runs_with_that_points_recorded_decisions(
    owner, coin, coin_apart, django_capture_on_commit_callbacks, monkeypatch
):
    from tests.backtests.test_lookahead import RUNTIME_ONLY

    run_job, jobs = sandbox.run_job, []
    # The engine's private bars are out of reach of the in-process layers; without them the probe is what sees it.
    monkeypatch.setattr(
        sandbox, "run_job", lambda **kwargs: jobs.append(kwargs) or run_job(**kwargs | {"layers": RUNTIME_ONLY})
    )
    result = optimization(owner, saved(owner, PEEKING_GRID), coin, django_capture_on_commit_callbacks,
                          data_ids=[str(coin.pk), str(coin_apart.pk)])  # fmt: skip

    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    assert best.decisions["code_sha256"] == services.code_sha256(PEEKING_GRID)
    probes = [job for job in jobs if job.get("probe")]
    assert len(jobs) == 6 + 3 and len(probes) == 3  # 6 points, then one job per cut, the cuts only
    assert [job["expected"] for job in probes] == [best.decisions["decisions"]] * 3
    cuts = probing.probe_cuts(probes[0]["datas"], best.decisions["decisions"], key=sandbox.probe_key())
    assert [job["cuts"] for job in probes] == [[cuts[2]], [cuts[1]], [cuts[0]]]  # the longest first
    assert list(ProbeCut.objects.filter(optimization=result).values_list("until_us", "status")) == [
        (cuts[0], Status.COMPLETED), (cuts[1], Status.COMPLETED), (cuts[2], Status.COMPLETED)
    ]  # fmt: skip
    assert best.parameters == {"fast": 5, "slow": 10}  # the largest size earns the most from its foresight
    assert (result.status, result.lookahead_check["status"]) == (Status.COMPLETED, "failed")
    assert (result.verdict["status"], result.verdict["reasons"][0]["code"]) == ("overfit", "lookahead")


@pytest.mark.parametrize("changed", ["data_version", "code_sha256"])
def test_the_probe_reruns_the_best_point_when_its_record_is_not_of_the_same_bars_or_code(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch, changed
):

    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)
    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    if changed == "data_version":
        best.data_version = "0" * 64
    else:
        best.decisions = {**best.decisions, "code_sha256": "0" * 64}
    best.save()
    run_job, jobs = sandbox.run_job, []
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: jobs.append(kwargs) or run_job(**kwargs))

    check = services._probe(result, best)

    assert [job["expected"] for job in jobs] == [None]  # the full run again, then its cuts
    assert (check["status"], check["iteration"]) == ("passed", best.iteration)


@pytest.mark.parametrize(("direction", "best"), [("maximize", 2), ("minimize", 4)])
def test_the_best_run_is_picked_by_the_target_statistic_alone_lowest_iteration_on_ties(
    owner, coin, django_capture_on_commit_callbacks, direction, best
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False,
                          target_direction=direction)  # fmt: skip
    scores = {1: None, 2: 7.5, 3: 7.5, 4: -0.25, 5: -0.25, 6: 3.0}  # 1 has no value; 2/3 and 4/5 tie
    for run in OptimizationRun.objects.filter(optimization=result):
        run.status, run.statistics = Status.COMPLETED, {"realized_pnl": scores[run.iteration]}
        run.save()

    assert services._best_run(result).iteration == best


@pytest.mark.parametrize(("direction", "best"), [("maximize", 2), ("minimize", 4)])
def test_a_run_without_the_target_statistic_is_never_the_best_even_where_every_other_is_worse_than_zero(
    owner, coin, django_capture_on_commit_callbacks, direction, best
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False,
                          target_direction=direction)  # fmt: skip
    # Every real score is on the far side of zero; a null (no trades) read as 0.0 would win.
    real = {2: -0.5, 3: -1.0, 4: -2.0, 5: -3.0} if direction == "maximize" else {2: 0.5, 3: 1.0, 4: 0.25, 5: 2.0}
    scores = {1: None, 6: None, **real}
    for run in OptimizationRun.objects.filter(optimization=result):
        run.status, run.statistics = Status.COMPLETED, {"realized_pnl": scores[run.iteration]}
        run.save()

    assert services._best_run(result).iteration == best


def test_a_failed_probe_run_closes_the_optimization_with_the_probe_not_run_and_the_grids_pbo(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):

    run_job = sandbox.run_job
    failed = sandbox.Outcome(False, ["process"], error={"code": "killed", "message": "stopped", "line": None})
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: failed if kwargs.get("probe") else run_job(**kwargs))
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    pbo, refusal = services.optimization_pbo(result)
    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    assert (result.status, result.lookahead_check) == (Status.COMPLETED, {
        "status": "not_run", "k": 3, "cuts": [], "reason": "the probe run failed: stopped",
        "iteration": best.iteration, "parameters": best.parameters,
    })  # fmt: skip
    assert result.verdict == services.verdict_of(
        strategy=result.strategy, daily_returns=series.unpack(best.returns), trades=best.trade_count,
        lookahead="not_run",
        pbo=pbo, pbo_refusal=refusal,
    )  # fmt: skip
    assert result.credits_charged == 6 * result.credits_per_iteration + result.credits_pbo * (pbo is not None)


@pytest.mark.parametrize("code", [SMA_CROSS, PEEKING_GRID], ids=["honest", "peeking"])
def test_a_probe_run_as_one_task_per_cut_gives_the_check_one_job_over_every_cut_gives(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch, code
):
    from tests.backtests.test_lookahead import RUNTIME_ONLY

    run_job = sandbox.run_job
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: run_job(**kwargs | {"layers": RUNTIME_ONLY}))
    result = optimization(owner, saved(owner, code), coin, django_capture_on_commit_callbacks)

    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    one_job = run_job(**services._probe_job(result, best), layers=RUNTIME_ONLY).result["lookahead_check"]
    assert result.lookahead_check == one_job | {"iteration": best.iteration, "parameters": best.parameters}
    assert (one_job["status"], one_job["method"]) == ("passed" if code is SMA_CROSS else "failed", "streamed")


def test_a_probes_cuts_are_read_in_cut_order_the_first_that_failed_or_differed_decides(
    owner, coin, django_capture_on_commit_callbacks
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)
    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    differed = {"cut": "B", "bar": "B", "full_run": None, "cut_run": {"bar": "B"}, "reason": None}
    passed = {"status": "passed", "k": 3, "cuts": ["A"]}
    failed = {"status": "failed", "k": 3, "cuts": ["B"], "first_difference": differed}
    stopped = {"code": "killed", "message": "stopped", "line": None}

    def check(*rows):
        return services._probe_of_cuts(
            [ProbeCut(pk=None, index=i, until_us=i, status=status, outcome=outcome, error=error)
             for i, (status, outcome, error) in enumerate(rows)], best
        )  # fmt: skip

    probed = {"iteration": best.iteration, "parameters": best.parameters}
    done, lost = (Status.COMPLETED, passed, None), (Status.FAILED, None, stopped)
    assert check(done, (Status.COMPLETED, failed, None), lost) == {
        "status": "failed", "k": 3, "cuts": ["A", "B"], "first_difference": differed
    } | probed  # fmt: skip
    assert check(done, done, done) == {"status": "passed", "method": "cuts", "k": 3, "cuts": ["A", "A", "A"]} | probed
    assert check(done, lost, (Status.COMPLETED, failed, None)) == {
        "status": "not_run", "k": 3, "cuts": [], "reason": "the probe run failed: stopped"
    } | probed  # fmt: skip


def probe_cuts_queued(owner, coin, capture):
    """An optimization whose points are all done: its last point ran the probe's last cut, the others queued (its
    datas have different bar times, so its probe is cut runs)."""
    from tests.backtests.conftest import import_walk

    apart = import_walk("LTCUSD", seed=13, start=datetime(2024, 1, 3, tzinfo=UTC))
    result = optimization(owner, saved(owner), coin, capture, execute=False, data_ids=[str(coin.pk), str(apart.pk)])
    with capture(execute=False):
        services.optimization_points_execute(
            run_ids=list(OptimizationRun.objects.filter(optimization=result).values_list("pk", flat=True)), claim="t"
        )
    cuts = list(ProbeCut.objects.filter(optimization=result))
    assert [cut.status for cut in cuts] == [Status.PENDING, Status.PENDING, Status.COMPLETED]
    assert Optimization.objects.get(pk=result.pk).status == Status.EXECUTING
    return result, cuts


def test_a_redelivered_probe_cut_fails_and_the_last_cut_closes_with_the_probe_not_run_and_uncharged(
    owner, coin, django_capture_on_commit_callbacks
):
    result, cuts = probe_cuts_queued(owner, coin, django_capture_on_commit_callbacks)
    services.optimization_probe_cut_execute(cut_id=cuts[1].pk)
    ProbeCut.objects.filter(pk=cuts[0].pk).update(status=Status.EXECUTING, started_at=now())  # its worker died

    services.optimization_probe_cut_execute(cut_id=cuts[0].pk)  # the redelivery

    result.refresh_from_db()
    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    assert list(ProbeCut.objects.filter(optimization=result).values_list("status", "error")) == [
        (Status.FAILED, services.WORKER_LOST), (Status.COMPLETED, None), (Status.COMPLETED, None)
    ]  # fmt: skip
    assert (result.status, result.lookahead_check) == (Status.COMPLETED, {
        "status": "not_run", "k": 3, "cuts": [], "iteration": best.iteration, "parameters": best.parameters,
        "reason": "the probe run failed: the worker running this job stopped before it finished",
    })  # fmt: skip
    pbo, refusal = services.optimization_pbo(result)
    assert result.grid_pbo == {"pbo": pbo, "refusal": refusal}  # computed while the last point's cut ran
    assert result.verdict["pbo"] == pbo
    assert result.credits_charged == 6 * result.credits_per_iteration + result.credits_pbo * (pbo is not None)
    assert credit_usage(user=owner)["credits_remaining"] == 1000 - result.credits_charged


def test_the_reaper_leaves_queued_probe_cuts_and_fails_a_cut_whose_worker_stopped(
    owner, coin, django_capture_on_commit_callbacks
):
    result, cuts = probe_cuts_queued(owner, coin, django_capture_on_commit_callbacks)
    with time_machine.travel(now() + timedelta(minutes=10)):
        assert services.stale_jobs_reap(older_than=timedelta(minutes=5)) == 0  # queued, not lost
    assert Optimization.objects.get(pk=result.pk).status == Status.EXECUTING
    ProbeCut.objects.filter(pk=cuts[1].pk).update(status=Status.EXECUTING, started_at=now())

    with time_machine.travel(now() + timedelta(minutes=10)):
        assert services.stale_jobs_reap(older_than=timedelta(minutes=5)) == 1
    assert Optimization.objects.get(pk=result.pk).status == Status.EXECUTING  # cut 0 is still queued
    Optimization.objects.filter(pk=result.pk).update(grid_pbo=None)  # as if this cut finished before it was kept
    services.optimization_probe_cut_execute(cut_id=cuts[0].pk)

    result.refresh_from_db()
    assert list(ProbeCut.objects.filter(optimization=result).values_list("status", flat=True)) == [
        Status.COMPLETED, Status.FAILED, Status.COMPLETED
    ]  # fmt: skip
    assert (result.status, result.lookahead_check["status"], result.lookahead_check["reason"]) == (
        Status.COMPLETED, "not_run", "the probe run failed: the worker running this job stopped before it finished"
    )  # fmt: skip
    pbo, _ = services.optimization_pbo(result)
    assert (result.grid_pbo, result.verdict["pbo"]) == (None, pbo)  # the closing cut computed it
    assert result.credits_charged == 6 * result.credits_per_iteration + result.credits_pbo * (pbo is not None)
    assert credit_usage(user=owner)["credits_remaining"] == 1000 - result.credits_charged  # no probe charged


def test_the_reaper_closes_an_optimization_whose_cuts_are_done_but_whose_closer_stopped(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    result, cuts = probe_cuts_queued(owner, coin, django_capture_on_commit_callbacks)
    close = services._probe_cuts_close

    def stops(optimization_id):
        raise RuntimeError("the worker stopped before it closed")

    monkeypatch.setattr(services, "_probe_cuts_close", stops)
    services.optimization_probe_cut_execute(cut_id=cuts[1].pk)
    with pytest.raises(RuntimeError):
        services.optimization_probe_cut_execute(cut_id=cuts[0].pk)  # the last cut: its close never ran
    assert Optimization.objects.get(pk=result.pk).status == Status.EXECUTING
    monkeypatch.setattr(services, "_probe_cuts_close", close)

    assert services.stale_jobs_reap(older_than=timedelta(minutes=5)) == 0  # not stale yet
    with time_machine.travel(now() + timedelta(minutes=10)):
        assert services.stale_jobs_reap(older_than=timedelta(minutes=5)) == 1

    result.refresh_from_db()
    best = OptimizationRun.objects.get(optimization=result, iteration=result.lookahead_check["iteration"])
    assert (result.status, result.lookahead_check) == (Status.COMPLETED, {
        "status": "passed", "method": "cuts", "k": 3, "cuts": [cut["cuts"][0] for cut in ProbeCut.objects.filter(
            optimization=result).values_list("outcome", flat=True)],
        "iteration": best.iteration, "parameters": best.parameters,
    })  # fmt: skip
    pbo = result.credits_pbo if result.verdict["pbo"] is not None else 0
    assert result.credits_charged == 6 * result.credits_per_iteration + result.credits_probe + pbo


def test_a_cancel_stops_the_probes_queued_cuts_and_charges_the_points_only(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):

    result, cuts = probe_cuts_queued(owner, coin, django_capture_on_commit_callbacks)
    cancelled = services.optimization_cancel(user=owner, optimization_id=str(result.pk))
    jobs = []
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: jobs.append(kwargs))

    for cut in cuts[:2]:
        services.optimization_probe_cut_execute(cut_id=cut.pk)  # the queued tasks arrive after the cancel

    assert jobs == []
    assert list(ProbeCut.objects.filter(optimization=result).values_list("status", flat=True)) == [
        Status.CANCELLED, Status.CANCELLED, Status.COMPLETED
    ]  # fmt: skip
    result.refresh_from_db()
    assert (result.status, result.lookahead_check, result.credits_charged) == (
        Status.CANCELLED, None, 6 * result.credits_per_iteration
    )  # fmt: skip
    assert cancelled.credits_charged == result.credits_charged
    assert credit_usage(user=owner)["credits_remaining"] == 1000 - result.credits_charged


def test_an_optimization_whose_probe_raises_stays_open_uncharged_for_the_reaper(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):

    run_job = sandbox.run_job

    def probe_raises(**kwargs):
        if kwargs.get("probe"):
            raise RuntimeError("the probe's worker broke")
        return run_job(**kwargs)

    monkeypatch.setattr(sandbox, "run_job", probe_raises)
    optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)  # the last chunk's task fails

    result = Optimization.objects.get()
    assert (result.status, result.completed_iterations, result.lookahead_check, result.verdict) == (
        Status.EXECUTING, 6, None, None
    )  # fmt: skip
    assert (result.credits_charged, result.finished_at) == (0, None)


def test_closing_an_optimization_reads_no_points_returns_or_decisions_and_hashes_every_point(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    close, selects = services._optimization_close, []

    def watched(*args, **kwargs):
        with CaptureQueriesContext(connection) as queries:
            close(*args, **kwargs)
        selects.extend(q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT"))

    monkeypatch.setattr(services, "_optimization_close", watched)
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    best = result.lookahead_check["iteration"]
    best_pk = OptimizationRun.objects.get(optimization=result, iteration=best).pk
    runs = [sql for sql in selects if "backtests_optimizationrun" in sql]
    # The best run's returns (its verdict), the points charged, the points hashed: no other row's returns.
    assert (result.status, len(runs)) == (Status.COMPLETED, 3)
    assert [sql for sql in runs if '"returns"' in sql] == [
        sql for sql in runs if sql.endswith(f'"backtests_optimizationrun"."id" = {best_pk} LIMIT 21')
    ]
    assert len([sql for sql in runs if '"returns"' in sql]) == 1
    assert [sql for sql in runs if '"decisions"' in sql] == []
    points = OptimizationRun.objects.filter(optimization=result, status=Status.COMPLETED).order_by("iteration")
    assert result.report_hash == services.statistics.optimization_hash(
        points=[{"iteration": r.iteration, "parameters": r.parameters, "statistics": r.statistics} for r in points],
        lookahead_check=result.lookahead_check, verdict=result.verdict,
    )  # fmt: skip
    assert len(points) == 6


def test_a_point_whose_child_sent_no_daily_returns_fails_and_records_nothing_of_them(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    import dataclasses

    from backtests.models import Trial

    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    run = OptimizationRun.objects.select_related("optimization__strategy").get(optimization=result, iteration=1)
    OptimizationRun.objects.filter(pk=run.pk).update(status=Status.EXECUTING)
    run_job = services.sandbox.run_job
    unaccounted = lambda **kwargs: dataclasses.replace(run_job(**kwargs), returns=None)  # noqa: E731
    monkeypatch.setattr(services.sandbox, "run_job", unaccounted)

    finish = services._run_point(result, run)

    assert finish == {"error": services.MISSING_RETURNS, "data_version": finish["data_version"]}
    assert services._point_finish(run.pk, run=run, **finish) is False
    run.refresh_from_db()
    assert (run.status, run.error, bytes(run.returns), run.statistics) == (
        Status.FAILED, services.MISSING_RETURNS, b"", None
    )  # fmt: skip
    assert Trial.objects.filter(run=run).exists() is False
    assert Optimization.objects.filter(pk=result.pk, completed_iterations=0, failed_iterations=1).exists()


@pytest.mark.django_db(transaction=True)
def test_migrating_point_returns_to_packed_bytes_and_back_keeps_every_series(
    owner, coin, django_capture_on_commit_callbacks
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration"))
    kept = {run.pk: [[f"2024-01-{day:02d}", run.pk / day] for day in range(1, 30)] for run in runs[:-1]}
    for pk, points in kept.items():
        OptimizationRun.objects.filter(pk=pk).update(returns=series.pack(points))
    kept[runs[-1].pk] = []  # a point that kept none
    OptimizationRun.objects.filter(pk=runs[-1].pk).update(returns=b"")

    before = model_before(("backtests", "0012_lz4_for_large_json"), "OptimizationRun")
    as_json = dict(before.objects.values_list("pk", "returns"))
    migrate_forward(("backtests", "0013_packed_point_returns"))

    assert as_json == kept
    after = {run.pk: series.unpack(run.returns) for run in OptimizationRun.objects.filter(optimization=result)}
    assert after == kept


def test_recording_a_point_takes_six_statements(owner, coin, django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    run = OptimizationRun.objects.select_related("optimization__strategy").get(optimization=result, iteration=1)
    OptimizationRun.objects.filter(pk=run.pk).update(status=Status.EXECUTING)
    finish = services._run_point(result, run)

    with CaptureQueriesContext(connection) as queries:
        assert services._point_finish(run.pk, run=run, **finish) is False

    # Its transaction, the locked optimization, the run, its trial, the counter: the row as claimed is reused and
    # the locked counters are not read again.
    assert len(queries.captured_queries) == 6
    run.refresh_from_db()
    assert (run.status, run.statistics) == (Status.COMPLETED, services.statistics.compute(finish["result"]))
    assert Optimization.objects.filter(pk=result.pk, completed_iterations=1, failed_iterations=0).exists()


# Column compression is PostgreSQL's own setting (migrations 0012 and 0013 leave other databases as they are):
# this runs in .ci/run's PostgreSQL pass and is skipped by its SQLite pass.
@pytest.mark.skipif(settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="a PostgreSQL column setting")
def test_the_large_values_a_run_writes_are_compressed_with_lz4_on_postgresql():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attrelid::regclass::text, attname, attcompression FROM pg_attribute WHERE attrelid IN "
            "('backtests_optimizationrun'::regclass, 'backtests_report'::regclass) AND attcompression <> '' "
            "AND NOT attisdropped "
            "ORDER BY 1, 2"
        )
        compressed = cursor.fetchall()

    assert compressed == [
        ("backtests_optimizationrun", "decisions", "l"),
        ("backtests_optimizationrun", "returns", "l"),
        ("backtests_report", "equity", "l"),
        ("backtests_report", "trades", "l"),
    ]


@pytest.mark.parametrize("given", ["\u00b2", "\uff13", "\u0663", "1" * 19, " 1", "-1"])
def test_a_symbol_id_that_is_not_plain_ascii_digits_within_range_is_not_found(coin, given):
    with pytest.raises(BacktestError) as refused:
        services.symbols_for(data_ids=[given], frequency="1d")

    assert selectors.symbol_get(symbol_id=given) is None
    assert (refused.value.code, refused.value.details) == ("symbol_not_found", {"data_id": given})
    assert selectors.symbol_get(symbol_id=str(coin.pk)) == coin


def test_a_bar_whose_period_has_not_ended_is_neither_sampled_nor_backtested(
    owner, coin, django_capture_on_commit_callbacks
):
    stored = bars_read(symbol=coin, frequency="1d")
    last = stored.get_column("ts").max()
    # The last day's bar is stored but its day is not over.
    with time_machine.travel(last + timedelta(hours=15), tick=False):
        strategy = saved(owner)
        sample_args = MarketDataSampleArgs(id=str(coin.pk), frequency="1d", limit=2)
        sample = call_tool(owner, "get_market_data_sample", sample_args)
        report = submit(owner, strategy, coin, django_capture_on_commit_callbacks, end_date=last.date())

    completed = stored.filter(stored.get_column("ts") < last)
    version = hashlib.sha256(bars_frame_version(completed, ticker="TSTUSD", frequency="1d").encode()).hexdigest()
    assert [point.timestamp for point in sample.points] == completed.get_column("ts").tail(2).to_list()
    assert (report.status, report.data_version) == (Status.COMPLETED, version)


BIG_SHORT = """
class BigShort(bt.Strategy):
    def next(self):
        if len(self) == 1:
            self.sell(size=20000)
"""


def test_a_report_whose_account_value_went_below_zero_says_its_ratios_mean_nothing(
    owner, coin, django_capture_on_commit_callbacks
):
    # 20,000 short at ~100 on 100,000 of cash: held at 25x leverage (80,000 of margin), ruined by a 5 % rise
    leveraged = SIM | {"leverage": 25.0}
    report = submit(owner, saved(owner, BIG_SHORT), coin, django_capture_on_commit_callbacks, simulation=leveraged)

    codes = [reason["code"] for reason in report.verdict["reasons"]]
    assert report.status == Status.COMPLETED
    assert report.statistics["maximum_drawdown_percentage"] > 100
    assert report.verdict["status"] == "insufficient_evidence"
    assert "account_value_not_positive" in codes


def test_a_missing_frequency_offers_only_frequencies_a_request_may_name(owner, coin):
    Symbol.objects.filter(pk=coin.pk).update(frequencies=["1m", "1d"])
    coin.refresh_from_db()

    with pytest.raises(services.BacktestError) as caught:
        services.require_frequency(coin, "5m")

    assert caught.value.message == "TSTUSD has no 5m data; available: 1d."
    assert caught.value.details["available"] == ["1d"]


def test_a_backtest_over_a_period_without_bars_is_refused_at_submission_and_nothing_is_kept(
    owner, coin, django_capture_on_commit_callbacks
):
    # It was taken, credits held, and failed as no_data on the worker: a FAILED report left for nothing.
    with pytest.raises(services.BacktestError) as refused:
        submit(owner, saved(owner), coin, django_capture_on_commit_callbacks,
               start_date=date(1990, 1, 1), end_date=date(1990, 12, 31))  # fmt: skip

    assert (refused.value.code, refused.value.message) == (
        "no_data", "TSTUSD has no 1d bars between 1990-01-01 and 1990-12-31."
    )  # fmt: skip
    assert Report.objects.count() == 0
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_an_optimization_over_a_period_without_bars_is_refused_at_submission_and_nothing_is_kept(
    owner, coin, django_capture_on_commit_callbacks
):
    start, end = services.day_bounds(date(2030, 1, 1), date(2030, 6, 30))

    with pytest.raises(services.BacktestError) as refused:
        optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, start=start, end=end)

    assert refused.value.code == "no_data"
    assert Optimization.objects.count() == 0
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def suspend(user) -> None:
    user.is_active = False  # an operator unticks "active" in the admin
    user.save(update_fields=["is_active"])


def test_a_backtest_queued_when_its_account_is_suspended_never_runs_and_its_credits_go_back(
    owner, coin, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        report = services.backtest_submit(
            user=owner, strategy_id=str(saved(owner).pk), data_ids=[str(coin.pk)], frequency="1d",
            start_date=date(2024, 1, 1), end_date=date(2024, 12, 31), parameters={}, simulation=SIM,
        )  # fmt: skip
    suspend(owner)

    services.backtest_execute(report_id=str(report.pk))

    report.refresh_from_db()
    assert (report.status, report.error, report.statistics) == (Status.FAILED, services.ACCOUNT_INACTIVE, None)
    assert credit_usage(user=owner)["credits_remaining"] == 1000


def test_an_optimization_whose_account_is_suspended_mid_grid_stops_as_a_cancel_would(
    owner, coin, django_capture_on_commit_callbacks
):
    result = optimization(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration"))
    services.optimization_point_execute(run_id=runs[0].pk, claim="task-0")
    suspend(owner)

    services.optimization_points_execute(run_ids=[run.pk for run in runs[1:3]], claim="task-1")
    services.optimization_point_execute(run_id=runs[3].pk, claim="task-3")

    stopped = Optimization.objects.get(pk=result.pk)
    assert (stopped.status, stopped.completed_iterations, stopped.credits_charged) == (Status.CANCELLED, 1, 5)
    statuses = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration").values_list(
        "status", flat=True))  # fmt: skip
    assert statuses == [Status.COMPLETED] + [Status.CANCELLED] * 5
    usage = credit_usage(user=owner)
    assert (usage["credits_consumed"], usage["credits_remaining"]) == (5, 995)


def test_a_probes_queued_cuts_of_a_suspended_account_never_run_and_only_the_points_are_charged(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    result, cuts = probe_cuts_queued(owner, coin, django_capture_on_commit_callbacks)
    suspend(owner)
    jobs = []
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: jobs.append(kwargs))

    for cut in cuts[:2]:
        services.optimization_probe_cut_execute(cut_id=cut.pk)

    result.refresh_from_db()
    assert jobs == []
    assert (result.status, result.credits_charged) == (Status.CANCELLED, 6 * result.credits_per_iteration)
    assert credit_usage(user=owner)["credits_remaining"] == 1000 - result.credits_charged


def test_a_dry_run_queued_when_its_account_is_suspended_never_runs(owner, monkeypatch):
    jobs = []
    monkeypatch.setattr(sandbox, "run_job", lambda **kwargs: jobs.append(kwargs))
    run = services.dry_run_submit(user=owner, code=SMA_CROSS)  # its task is queued on commit, never in this test
    suspend(owner)

    services.dry_run_execute(run_id=str(run.pk))

    run.refresh_from_db()
    assert jobs == []
    assert (run.status, run.outcome) == (Status.CANCELLED, None)
