from datetime import UTC, datetime

import polars as pl
import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from accounts.models import User
from backtests import selectors, series, services, statistics
from backtests.dryrun import walk
from backtests.models import DryRunPass, Optimization, OptimizationRun, Status, Strategy, Trial
from billing.selectors import credit_usage
from evidence.marketdata.importers import bars_import
from evidence.models import Symbol
from leroy.clock import now
from tests.backtests.conftest import SMA_CROSS, frame_of, import_walk, optimization_args
from tests.conftest import MCP_URL

OPT_SIM = {"initial_cash": 100_000.0, "commission_schema": {"commission": 0.0, "leverage": 1.0}, "buy_on_close": False}
MAY = int(datetime(2024, 5, 1, tzinfo=UTC).timestamp()) * 1_000_000


def saved(owner) -> Strategy:
    DryRunPass.objects.create(user=owner, code_sha256=services.code_sha256(SMA_CROSS), created_at=now())
    return services.strategy_create(user=owner, name="SMA", code=SMA_CROSS)


def walk_forward(owner, strategy, coin, capture, *, execute=True, **overrides) -> Optimization:
    """Three rolling folds over 2024-01..05: train two months, test the next one (March, April, May)."""
    kwargs = dict(
        user=owner, strategy_id=str(strategy.pk), name="wf", data_ids=[str(coin.pk)], frequency="1d",
        start=datetime(2024, 1, 1, tzinfo=UTC), end=datetime(2024, 5, 31, 23, 59, 59, 999999, tzinfo=UTC),
        grids=[{"name": "fast", "min": 3, "max": 4, "step": 1}], parameters={"slow": 10, "size": 5},
        simulation_parameters=OPT_SIM, target_metric="realized_pnl", target_direction="maximize",
        additional_metrics=[], use_free_optimization=False,
        walk_forward={"train_months": 2, "test_months": 1, "anchored": False},
    ) | overrides  # fmt: skip
    with capture(execute=execute):
        result = services.optimization_submit(**kwargs)
    result.refresh_from_db()
    return result


def chosen_of(optimization: Optimization, fold: int) -> OptimizationRun:
    runs = OptimizationRun.objects.filter(optimization=optimization, fold=fold, out_of_sample=False)
    return max(sorted(runs, key=lambda r: r.iteration), key=lambda r: r.statistics["realized_pnl"])


def test_folds_roll_or_stay_anchored_and_cover_whole_windows_only():
    start, end = datetime(2024, 1, 31, tzinfo=UTC), datetime(2024, 7, 15, tzinfo=UTC)

    rolling = services.walk_forward_folds(start=start, end=end, train_months=3, test_months=1, anchored=False)
    anchored = services.walk_forward_folds(start=start, end=end, train_months=3, test_months=1, anchored=True)

    windows = [(f["train_start"][:10], f["train_end"][:10], f["test_end"][:10]) for f in rolling]
    assert windows == [("2024-01-31", "2024-04-30", "2024-05-31"), ("2024-02-29", "2024-05-31", "2024-06-30")]
    assert [f["train_start"][:10] for f in anchored] == ["2024-01-31", "2024-01-31"]
    assert [f["test_start"] for f in anchored] == [f["test_start"] for f in rolling]  # July is not whole: no fold


def test_folds_stop_at_the_year_9999_and_a_period_that_would_need_more_is_refused_in_words():
    last = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

    folds = services.walk_forward_folds(
        start=datetime(9999, 1, 1, tzinfo=UTC), end=last, train_months=3, test_months=3, anchored=False
    )
    with pytest.raises(services.BacktestError) as refused:
        services.walk_forward_folds(
            start=datetime(9990, 1, 1, tzinfo=UTC), end=last, train_months=120, test_months=120, anchored=False
        )

    assert [(f["test_start"][:10], f["test_end"][:10]) for f in folds] == [
        ("9999-04-01", "9999-07-01"),
        ("9999-07-01", "9999-10-01"),
    ]  # the fold ending 10000-01-01 cannot be written: not made
    assert refused.value.code == "period_too_short"
    assert refused.value.message.endswith("(the period must end after the year 9999).")


@pytest.mark.django_db
def test_walk_forward_scores_each_folds_choice_on_its_test_window(owner, coin, django_capture_on_commit_callbacks):
    result = walk_forward(owner, saved(owner), coin, django_capture_on_commit_callbacks)

    assert (result.status, result.mode, result.total_iterations, result.completed_iterations) == (
        Status.COMPLETED, "walk_forward", 6, 6
    )  # fmt: skip
    report = result.walk_forward
    assert [f["test_start"][:10] for f in report["folds"]] == ["2024-03-01", "2024-04-01", "2024-05-01"]
    tests = {r.fold: r for r in OptimizationRun.objects.filter(optimization=result, out_of_sample=True)}
    assert sorted(tests) == [1, 2, 3] and [tests[k].iteration for k in (1, 2, 3)] == [7, 8, 9]
    for fold in report["folds"]:
        chosen, test = chosen_of(result, fold["fold"]), tests[fold["fold"]]
        assert fold["parameters"] == chosen.parameters == test.parameters
        assert (fold["in_sample"], fold["out_of_sample"], fold["test_status"]) == (
            chosen.statistics, test.statistics, "COMPLETED"
        )  # fmt: skip
        tested = series.unpack(test.returns)
        assert fold["test_start"][:10] <= tested[0][0] and tested[-1][0] < fold["test_end"][:10]
        assert series.unpack(chosen.returns)[-1][0] < fold["train_end"][:10]  # it read no bar of its test window
    stitched = [point for k in (1, 2, 3) for point in series.unpack(tests[k].returns)]
    assert report["oos_returns"] == stitched
    final = 100_000.0
    for _, ret in stitched:
        final *= 1 + ret
    assert report["oos_equity_curve"][-1] == [stitched[-1][0], pytest.approx(final, rel=1e-12)]
    oos = statistics.return_metrics(stitched)["cagr"]
    in_sample = sum(chosen_of(result, k).statistics["cagr"] for k in (1, 2, 3)) / 3
    assert (report["oos_annualized_return"], report["is_annualized_return"]) == (oos, pytest.approx(in_sample))
    assert report["efficiency"] == (pytest.approx(oos / in_sample) if in_sample > 0 else None)
    # 6 train runs and 3 test runs at 5 credits, and the probe of the last fold's choice; no PBO
    assert (result.credits_reserved, result.credits_charged) == (50, 50)
    assert credit_usage(user=owner)["credits_remaining"] == 950
    verdict = result.verdict
    assert verdict["pbo"] is None and verdict["lookahead_check"] == result.lookahead_check["status"] == "passed"
    assert result.lookahead_check["parameters"] == report["folds"][-1]["parameters"]
    assert verdict["deflated_sharpe"]["observations"] == len(stitched)
    assert verdict["deflated_sharpe"]["trials"] == Trial.objects.filter(user=owner).count() == 9
    assert len(result.report_hash) == 64


@pytest.mark.django_db
def test_walk_forward_never_reads_test_data_while_fitting(owner, coin, django_capture_on_commit_callbacks):
    data = walk("TSTUSD", bars=120, seed=7)  # the `coin` fixture's bars
    factor = pl.Series([1.0 if ts < MAY else (1 + i % 3) / 2 for i, ts in enumerate(data["ts_us"])])
    frame = frame_of(data).with_columns(pl.col(c) * factor for c in ("open", "high", "low", "close"))
    bars_import(ticker="PRTUSD", frequency="1d", frame=frame, asset_class="crypto", name="PRT/USD")
    perturbed = Symbol.objects.get(ticker="PRTUSD")  # equal to `coin` but in the last test window (May)
    strategy = saved(owner)

    plain = walk_forward(owner, strategy, coin, django_capture_on_commit_callbacks)
    moved = walk_forward(owner, strategy, perturbed, django_capture_on_commit_callbacks)

    def fitting(result):
        runs = OptimizationRun.objects.filter(optimization=result, out_of_sample=False).order_by("iteration")
        return [(r.fold, r.parameters, r.statistics, r.returns) for r in runs]

    assert fitting(moved) == fitting(plain)  # every train run, in every fold, is untouched
    assert [f["parameters"] for f in moved.walk_forward["folds"]] == [
        f["parameters"] for f in plain.walk_forward["folds"]
    ]
    assert moved.walk_forward["folds"][:2] == plain.walk_forward["folds"][:2]
    assert moved.walk_forward["folds"][2]["out_of_sample"] != plain.walk_forward["folds"][2]["out_of_sample"]


@pytest.mark.django_db
def test_a_period_too_short_for_two_folds_is_refused_and_charges_nothing(
    owner, coin, django_capture_on_commit_callbacks
):
    strategy = saved(owner)
    with pytest.raises(services.BacktestError) as caught:
        walk_forward(owner, strategy, coin, django_capture_on_commit_callbacks,
                     walk_forward={"train_months": 4, "test_months": 1, "anchored": True})  # fmt: skip

    assert caught.value.code == "period_too_short"
    assert caught.value.message == (
        "4 train and 1 test months from 2024-01-01 give 1 whole fold(s) by 2024-05-31; walk-forward needs at least "
        "2 (the period must reach 2024-06-30)."
    )
    assert (caught.value.details["folds"], caught.value.details["min_folds"]) == (1, 2)
    assert Optimization.objects.exists() is False
    assert credit_usage(user=owner)["credits_remaining"] == 1000


@pytest.mark.django_db
def test_cancel_mid_walk_forward_stops_the_rest_and_refunds_exactly(owner, coin, django_capture_on_commit_callbacks):
    result = walk_forward(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration"))
    assert credit_usage(user=owner)["credits_remaining"] == 950

    services.optimization_point_execute(run_id=runs[0].pk, claim="task-0")
    cancelled = services.optimization_cancel(user=owner, optimization_id=str(result.pk))
    for run in runs[1:]:
        # Queued tasks arriving after the cancel run nothing.
        services.optimization_point_execute(run_id=run.pk, claim=f"task-{run.pk}")

    assert (cancelled.status, cancelled.completed_iterations, cancelled.credits_charged) == (Status.CANCELLED, 1, 5)
    statuses = list(OptimizationRun.objects.filter(optimization=result).values_list("status", flat=True))
    assert statuses == [Status.COMPLETED] + [Status.CANCELLED] * 5  # no test run was made
    usage = credit_usage(user=owner)
    assert (usage["credits_consumed"], usage["credits_remaining"]) == (5, 995)


@pytest.mark.django_db
def test_a_test_run_in_flight_at_a_cancel_is_cancelled_and_counts_as_no_trial(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    result = walk_forward(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration"))
    run_point = services._run_point

    def cancelled_while_testing(optimization, run):
        finished = run_point(optimization, run)
        if run.out_of_sample:
            services.optimization_cancel(user=owner, optimization_id=str(result.pk))
        return finished

    monkeypatch.setattr(services, "_run_point", cancelled_while_testing)
    for run in runs:
        services.optimization_point_execute(run_id=run.pk, claim=f"task-{run.pk}")

    result.refresh_from_db()
    test = OptimizationRun.objects.get(optimization=result, out_of_sample=True)
    assert (result.status, result.credits_charged) == (Status.CANCELLED, 30)  # the six train points
    assert test.status == Status.CANCELLED
    assert Trial.objects.filter(run__out_of_sample=True).exists() is False
    assert Trial.objects.count() == 6


@pytest.mark.django_db
def test_a_walk_forward_whose_account_is_suspended_after_its_last_train_point_runs_no_test_window(
    owner, coin, django_capture_on_commit_callbacks, monkeypatch
):
    result = walk_forward(owner, saved(owner), coin, django_capture_on_commit_callbacks, execute=False)
    runs = list(OptimizationRun.objects.filter(optimization=result).order_by("iteration"))
    run_point = services._run_point

    def suspended_after_the_last_train_point(optimization, run):
        finished = run_point(optimization, run)
        if run.pk == runs[-1].pk:
            User.objects.filter(pk=owner.pk).update(is_active=False)  # an operator unticks "active"
        return finished

    monkeypatch.setattr(services, "_run_point", suspended_after_the_last_train_point)
    for run in runs:
        services.optimization_point_execute(run_id=run.pk, claim=f"task-{run.pk}")

    result.refresh_from_db()
    assert (result.status, result.credits_charged) == (Status.CANCELLED, 30)  # the six train points
    assert OptimizationRun.objects.filter(optimization=result, out_of_sample=True).exists() is False


def _saved_strategy_and_coin(owner):
    return str(saved(owner).pk), str(import_walk("TSTUSD").pk)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_an_agent_walks_forward_over_mcp(mcp_http, owner, write_key):
    strategy_id, coin_id = await sync_to_async(_saved_strategy_and_coin)(owner)
    args = optimization_args(strategy_id, coin_id, start_date="2024-01-01", end_date="2024-04-30",
                             grids=[{"name": "fast", "min": 3, "max": 3, "step": 1}],
                             parameters=[{"name": "slow", "value": 10}],
                             train_period={"months": 2}, test_period={"months": 1})  # fmt: skip
    client = Client(streamable_http_client(MCP_URL, http_client=mcp_http(write_key)), mode="2026-07-28")
    async with client as session:
        started = await session.call_tool("run_walk_forward_optimization", args)
        assert started.is_error is False, started.content[0].text
        key = {"id": started.structured_content["optimization_id"]}
        waited = (await session.call_tool("wait_for_optimization", key)).structured_content
        detail = (await session.call_tool("get_walk_forward_optimization", key)).structured_content
        summary = (await session.call_tool("get_optimization", key)).structured_content
        results = await session.call_tool("list_optimization_results", key | {"sort_by": "iteration"})
        short = await session.call_tool("run_walk_forward_optimization", args | {"end_date": "2024-03-31"})

    assert (started.structured_content["total_iterations"], started.structured_content["credits_reserved"]) == (2, 25)
    assert (waited["status"], waited["completed_iterations"]) == ("COMPLETED", 2)
    assert (summary["mode"], detail["status"], detail["verdict"]["pbo"]) == ("walk_forward", "COMPLETED", None)
    assert len(detail["report_hash"]) == 64
    folds = detail["walk_forward"]["folds"]
    assert [(f["fold"], f["parameters"], f["test_status"]) for f in folds] == [
        (1, {"fast": 3}, "COMPLETED"), (2, {"fast": 3}, "COMPLETED")
    ]  # fmt: skip
    assert "oos_returns" not in detail["walk_forward"] and detail["walk_forward"]["oos_equity_curve"]
    assert [(r["fold"], r["out_of_sample"]) for r in results.structured_content["items"]] == [
        (1, False), (2, False), (1, True), (2, True)
    ]  # fmt: skip
    assert short.is_error is True and short.structured_content["error"]["code"] == "period_too_short"
    assert await Optimization.objects.acount() == 1


@pytest.mark.django_db
def test_the_walk_forward_read_finds_only_walk_forward_optimizations(owner, coin, django_capture_on_commit_callbacks):
    strategy = saved(owner)
    grid = walk_forward(owner, strategy, coin, django_capture_on_commit_callbacks, execute=False, walk_forward=None)
    forward = walk_forward(owner, strategy, coin, django_capture_on_commit_callbacks, execute=False)

    assert (grid.mode, grid.total_iterations, grid.credits_reserved) == ("grid", 2, 16)  # 2 points, probe, PBO
    assert selectors.walk_forward_get(user=owner, optimization_id=str(grid.pk)) is None
    assert selectors.walk_forward_get(user=owner, optimization_id=str(forward.pk)) == forward
    assert selectors.optimization_get(user=owner, optimization_id=str(forward.pk)) == forward


@pytest.mark.django_db
def test_the_optimization_page_shows_each_folds_choice_and_the_efficiency(
    client, owner, coin, django_capture_on_commit_callbacks
):
    result = walk_forward(owner, saved(owner), coin, django_capture_on_commit_callbacks)
    client.force_login(owner)

    page = client.get(f"/account/optimizations/{result.pk}/").content.decode()

    report = result.walk_forward
    assert "2 months train, 1 test, rolling" in page
    for fold in report["folds"]:
        oos = fold["out_of_sample"]["realized_pnl"]
        assert (
            f'<td class="num">{fold["fold"]}</td><td>{fold["train_start"][:10]} to {fold["train_end"][:10]}</td>'
            f"<td>{fold['test_start'][:10]} to {fold['test_end'][:10]}</td>"
            f'<td class="num">{fold["parameters"]["fast"]}</td>'
        ) in page
        assert f'<td class="num">{oos:.4f}</td><td>COMPLETED</td></tr>' in page
    efficiency = "—" if report["efficiency"] is None else f"{report['efficiency']:.3f}"
    assert f"efficiency {efficiency}" in page
    assert 'id="oos-equity-chart"' in page
    assert 'id="heat-map"' not in page  # one heat map would mix the folds' points


@pytest.mark.django_db
def test_a_grid_optimization_page_has_no_walk_forward_block(client, owner, coin, django_capture_on_commit_callbacks):
    grid = walk_forward(owner, saved(owner), coin, django_capture_on_commit_callbacks, walk_forward=None)
    client.force_login(owner)

    page = client.get(f"/account/optimizations/{grid.pk}/").content.decode()

    assert page.count('<tr><td class="num">') == 2 and 'id="folds"' not in page and "Walk-forward" not in page
