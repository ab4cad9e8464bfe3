from datetime import timedelta

import pytest
import time_machine

from accounts import services as account_services
from billing.models import UsageEvent
from billing.services import BillingError
from evidence.live import frames
from evidence.marketdata import calendar
from evidence.memory.artifact import BPS, SYMBOL_BASELINE
from evidence.memory.reader import PCT, MemoryReader
from evidence.memory.selectors import memory_reader
from evidence.memory.strategies import mask_names, names_mask
from evidence.models import Frame
from evidence.research import analysis as research
from evidence.research.analysis import ResearchError
from evidence.schemas import ExecutionArgs, ExitPolicyArgs, LeadersArgs, LineageArgs, RegimeArgs, SearchArgs, SetupArgs
from tests.calls import call_tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(db):
    return account_services.user_create(email="agent@example.com", password=None)


def matched_rows(result, side="buy"):
    """The reservoir rows of the key a setup tool says it matched, read straight from the artifact."""
    frame = Frame.objects.get(symbol__ticker=result.frame.symbol)
    mask = frame.buy_mask if side == "buy" else frame.sell_mask
    key = result.match.key
    return key_rows(key, side, result.frame.symbol, mask, frame.regime)


def key_rows(key, side, symbol, mask, regime):
    tier = key.match_strength.score
    fields = {
        "symbol": symbol if key.symbol else "",
        "mask": mask if key.active_signals is not None else -1,
        "regime": regime if key.regime is not None else -1,
        "band": min(mask.bit_count(), 4) if key.signal_count_band is not None else -1,
    }
    return memory_reader().examples(tier=tier, side=side, **fields)


def test_leaderboard_ranks_fresh_frames_by_active_signals_and_costs_one_lookup_for_one_or_five(fed_world, user):
    one = call_tool(user, "get_current_confluence_leaders", LeadersArgs(side="sell", limit=1))
    five = call_tool(user, "get_current_confluence_leaders", LeadersArgs(side="sell", limit=5))

    frames = {f.symbol.ticker: f for f in Frame.objects.select_related("symbol").exclude(symbol__ticker="SYNX")}
    expected = sorted(frames, key=lambda t: (-frames[t].sell_mask.bit_count(), frames[t].buy_mask.bit_count(), t))
    assert [leader.symbol for leader in five.leaders] == expected == ["BRVO", "ALFA"]
    assert [leader.symbol for leader in one.leaders] == ["BRVO"]
    top = five.leaders[0]
    assert top.active_signals == mask_names(frames["BRVO"].sell_mask)
    assert (top.active_signal_count, top.opposing_signal_count) == (13, 1)
    assert top.source_time == fed_world.replay - timedelta(minutes=1)
    assert (one.usage.lookup_cost, one.usage.used_lookups) == (1, 1)
    assert (five.usage.lookup_cost, five.usage.used_lookups) == (1, 2)
    assert five.provenance.artifact_sha256 == fed_world.sha256


def test_leaderboard_with_stale_frames_is_empty_and_free(fed_world, user):
    with time_machine.travel(fed_world.replay + timedelta(minutes=10), tick=False):
        result = call_tool(user, "get_current_confluence_leaders", LeadersArgs(side="buy"))

    assert result.leaders == []
    assert (result.frames_considered, result.frames_excluded_stale) == (2, 2)
    assert result.usage.lookup_cost == 0
    assert UsageEvent.objects.exists() is False


def test_search_returns_only_served_keys_with_the_minimum_sample_and_the_required_signals(fed_world, user):
    args = SearchArgs(side="buy", horizon_minutes=15, signals=["vwap_trend"], min_sample_sessions=5, limit=50)
    result = call_tool(user, "search_market_memory", args)

    reader = memory_reader()
    assert result.effective_min_sample_sessions == 5
    assert len(result.results) > 0
    for hit in result.results:
        assert hit.key.match_strength.score in (5, 4, 3)  # tiers 2 and 1 do not key on signals
        assert "vwap_trend" in hit.key.active_signals
        assert hit.stats.distinct_sessions >= 5
        stored = reader.key_evidence(
            tier=hit.key.match_strength.score, side="buy", horizon=15, symbol=hit.key.symbol or "",
            mask=names_mask(hit.key.active_signals), regime=hit.key.regime.id if hit.key.regime else -1,
        )  # fmt: skip
        assert (hit.stats.sample_size, hit.stats.average_return_pct) == (stored.row_count, stored.average_return_pct)
    sessions = [hit.stats.distinct_sessions for hit in result.results]
    assert sessions == sorted(sessions, reverse=True)
    assert result.usage.lookup_cost == 1


def test_search_never_goes_below_the_artifact_minimum(fed_world, user):
    result = call_tool(user, "search_market_memory", SearchArgs(side="sell", horizon_minutes=5, tier=5))

    assert result.effective_min_sample_sessions == memory_reader().min_sessions == 3
    assert {hit.key.match_strength.tier for hit in result.results} == {"exact_setup"}
    assert min(hit.stats.distinct_sessions for hit in result.results) >= 3


def test_search_with_an_unknown_signal_is_refused_without_a_charge(fed_world, user):
    with pytest.raises(ResearchError) as error:
        call_tool(user, "search_market_memory", SearchArgs(side="buy", horizon_minutes=5, signals=["astrology"]))

    assert error.value.code == "invalid_request"
    assert UsageEvent.objects.exists() is False


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        ({"symbol": "ZZZZ"}, "unknown_symbol", "ZZZZ is not in Leroy's verified read model."),
        (
            {"tier": 1, "signals": ["vwap_trend"]},
            "invalid_request",
            "Tier 1 keys are not keyed on active signals: signals need tier 3, 4 or 5, a symbol tier 5.",
        ),
        (
            {"tier": 3, "symbol": "ALFA"},
            "invalid_request",
            "Tier 3 keys are not keyed on a symbol: signals need tier 3, 4 or 5, a symbol tier 5.",
        ),
    ],
)
def test_a_search_no_key_can_answer_is_refused_without_a_charge(fed_world, user, arguments, code, message):
    with pytest.raises(ResearchError) as error:
        call_tool(user, "search_market_memory", SearchArgs(side="buy", horizon_minutes=15, **arguments))

    assert (error.value.code, error.value.message) == (code, message)
    assert UsageEvent.objects.exists() is False


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "historical",
            "min_sample_sessions can be at most 13: the historical memory covers 13 sessions "
            "(2025-11-25 to 2025-12-12), so no key has 14.",
        ),
        (
            "forward_overlay",
            "min_sample_sessions can be at most 1: the forward overlay covers 1 session "
            "(2025-12-15 to 2025-12-15), so no key has 2.",
        ),
    ],
)
def test_a_minimum_sample_beyond_the_sources_sessions_is_refused_without_a_charge(fed_world, user, source, message):
    covered = memory_reader().coverage()[source]["sessions"]
    args = SearchArgs(side="buy", horizon_minutes=15, min_sample_sessions=covered + 1, source=source)

    with pytest.raises(ResearchError) as error:
        call_tool(user, "search_market_memory", args)

    assert (error.value.code, error.value.message) == ("invalid_request", message)
    assert UsageEvent.objects.exists() is False


def test_a_minimum_sample_equal_to_the_sources_sessions_is_answered(fed_world, user):
    covered = memory_reader().coverage()["historical"]["sessions"]
    args = SearchArgs(side="buy", horizon_minutes=15, min_sample_sessions=covered)

    result = call_tool(user, "search_market_memory", args)

    assert result.effective_min_sample_sessions == covered == 13
    assert result.usage.lookup_cost == 1


def test_a_behind_forward_overlay_is_withheld_with_its_lag(fed_world, user, monkeypatch):
    behind = {"status": "behind", "last_verified_session": "2025-12-12", "lag_sessions": 2}
    monkeypatch.setattr(MemoryReader, "freshness", lambda self, at: behind)

    result = call_tool(
        user, "search_market_memory", SearchArgs(side="buy", horizon_minutes=5, source="forward_overlay")
    )

    assert result.results == []
    assert result.withheld_reason == (
        "The forward overlay is behind (2 completed sessions behind); its keys are withheld, not shown as current."
    )
    assert (result.forward_overlay_freshness.status, result.forward_overlay_freshness.lag_sessions) == ("behind", 2)
    assert (result.usage.lookup_cost, UsageEvent.objects.exists()) == (0, False)  # a withheld answer is free


def test_a_current_forward_overlay_is_served_as_such(fed_world, user):
    result = call_tool(
        user, "search_market_memory", SearchArgs(side="buy", horizon_minutes=5, source="forward_overlay", limit=3)
    )

    assert result.forward_overlay_freshness.status == "current"
    assert result.withheld_reason is None
    assert result.source == "forward_overlay"


def test_analogues_are_the_matched_keys_stored_rows_nearest_first_with_their_outcomes(fed_world, user):
    result = call_tool(user, "compare_historical_analogues", SetupArgs(symbol="alfa", side="buy", horizon_minutes=15))

    assert result.status == "matched"
    evidence = memory_reader().lookup(
        symbol="ALFA", side="buy", mask=Frame.objects.get(symbol__ticker="ALFA").buy_mask,
        regime=result.frame.regime.id, horizons=(15,),
    )[15]  # fmt: skip
    assert (result.match.key.match_strength.score, result.match.stats.sample_size) == (
        evidence.tier,
        evidence.row_count,
    )
    rows = {(r["row_symbol"], r["ts"]): r for r in matched_rows(result)}
    assert len(result.analogues) == len(rows) == 5
    for analogue in result.analogues:
        row = rows[(analogue.symbol, analogue.source_time.strftime("%Y-%m-%dT%H:%M:%SZ"))]
        assert analogue.outcomes[1].return_pct == round(row["r_15"] / PCT, 10)
        assert analogue.outcomes[1].max_adverse_excursion_pct == round(row["adv_15"] / PCT, 10)
        assert analogue.active_signals == mask_names(row["row_mask"])
    distances = [(a.signal_distance, not a.same_regime) for a in result.analogues]
    assert distances == sorted(distances)
    assert result.provenance.artifact_sha256 == fed_world.sha256
    assert result.usage.lookup_cost == 1


def test_analogues_without_a_frame_are_unavailable_and_free(world, user):
    with time_machine.travel(world.replay, tick=False):
        result = call_tool(user, "compare_historical_analogues", SetupArgs(symbol="ALFA", side="buy"))

    assert (result.status, result.match, result.analogues) == ("unavailable", None, [])
    assert result.reason == "No verified frame for ALFA in the current session yet."
    assert result.usage.lookup_cost == 0
    assert UsageEvent.objects.exists() is False


SETUP_TOOLS = [
    ("compare_historical_analogues", SetupArgs),
    ("explain_setup_failure", SetupArgs),
    ("compare_against_benchmark", SetupArgs),
    ("simulate_exit_policy", lambda **kw: ExitPolicyArgs(**kw, stop_bps=50, target_bps=50)),
]


@pytest.mark.parametrize(("tool", "args"), SETUP_TOOLS)
def test_a_setup_tools_horizon_past_todays_close_is_not_looked_up_and_free(world, user, tool, args):
    close = frames.open_session(world.replay).close
    with time_machine.travel(close - timedelta(minutes=10), tick=False):  # the frame's bar starts at close - 11 min
        frames.replay_tick()
        frames.frames_refresh()
        result = call_tool(user, tool, args(symbol="ALFA", side="buy", horizon_minutes=15))

    assert (result.status, result.reason, result.match) == (
        "no_comparable_sample",
        calendar.HORIZON_CROSSES_CLOSE,
        None,
    )
    assert result.frame.source_time == close - timedelta(minutes=11)
    assert result.usage.lookup_cost == 0
    assert UsageEvent.objects.exists() is False


def test_a_setup_tools_horizon_that_fits_before_the_close_is_looked_up_and_charged(world, user):
    close = frames.open_session(world.replay).close
    with time_machine.travel(close - timedelta(minutes=10), tick=False):
        frames.replay_tick()
        frames.frames_refresh()
        result = call_tool(
            user, "compare_historical_analogues", SetupArgs(symbol="ALFA", side="buy", horizon_minutes=5)
        )

    assert result.reason != calendar.HORIZON_CROSSES_CLOSE
    assert result.usage.lookup_cost == 1


@pytest.mark.parametrize(("tool", "args"), SETUP_TOOLS)
def test_a_stale_frames_setup_shows_its_history_and_is_free(fed_world, user, tool, args):
    with time_machine.travel(fed_world.replay + timedelta(minutes=10), tick=False):  # a halt: no newer frame
        result = call_tool(user, tool, args(symbol="ALFA", side="buy", horizon_minutes=15))

    assert (result.status, result.frame.frame_status) == ("matched", "stale")
    assert result.usage.lookup_cost == 0
    assert UsageEvent.objects.exists() is False


def test_unknown_symbol_has_no_setup_and_nothing_fabricated(fed_world, user):
    result = call_tool(user, "explain_setup_failure", SetupArgs(symbol="NOPE", side="sell"))

    assert (result.status, result.frame.frame_status, result.winners, result.losers) == (
        "unavailable",
        "unavailable",
        None,
        None,
    )
    assert result.usage.lookup_cost == 0


def test_failure_splits_the_matched_rows_into_winners_and_losers(fed_world, user):
    result = call_tool(user, "explain_setup_failure", SetupArgs(symbol="ALFA", side="buy", horizon_minutes=15))

    rows = matched_rows(result)
    winners = [r for r in rows if r["r_15"] > 0]
    losers = [r for r in rows if r["r_15"] <= 0]
    assert (result.winners.rows, result.losers.rows, result.rows_without_label) == (len(winners), len(losers), 0)
    assert result.losers.mean_return_pct == round(sum(r["r_15"] for r in losers) / len(losers) / PCT, 10)
    assert result.winners.mean_adverse_excursion_pct == round(
        sum(r["adv_15"] for r in winners) / len(winners) / PCT, 10
    )
    assert result.adverse_excursion_gap_pct == round(
        result.losers.mean_adverse_excursion_pct - result.winners.mean_adverse_excursion_pct, 10
    )
    assert sum(result.losers.time_of_day.values()) == len(losers)
    assert result.usage.lookup_cost == 1


def test_benchmark_comparison_reads_the_benchmarks_own_baseline(fed_world, user):
    result = call_tool(user, "compare_against_benchmark", SetupArgs(symbol="ALFA", side="buy", horizon_minutes=15))

    baseline = memory_reader().key_evidence(tier=SYMBOL_BASELINE, side="buy", horizon=15, symbol="SYNX")
    assert result.benchmark_symbol == "SYNX"
    assert (result.benchmark.sample_size, result.benchmark.average_return_pct) == (
        baseline.row_count,
        baseline.average_return_pct,
    )
    assert result.return_difference_bps == round(
        (result.match.stats.average_return_pct - baseline.average_return_pct) * 100, 4
    )
    assert result.win_rate_difference == round(result.match.stats.win_rate - baseline.win_rate, 6)


def test_exit_policy_with_far_levels_is_all_time_exits_at_the_stored_returns(fed_world, user):
    args = ExitPolicyArgs(symbol="ALFA", side="buy", horizon_minutes=15, stop_bps=5000, target_bps=5000)
    result = call_tool(user, "simulate_exit_policy", args)

    rows = matched_rows(result)
    assert result.outcomes.model_dump() == {"target_first": 0, "stop_first": 0, "time_exit": 5, "unresolved": 0}
    assert result.mean_resolved_return_pct == round(sum(r["r_15"] for r in rows) / len(rows) / PCT, 10)
    assert (result.key_target_reached_share, result.key_stop_reached_share) == (None, None)  # not a stored level


def test_exit_policy_never_orders_a_window_that_touched_both_levels(fed_world, user):
    args = ExitPolicyArgs(symbol="ALFA", side="buy", horizon_minutes=15, stop_bps=25, target_bps=25)
    result = call_tool(user, "simulate_exit_policy", args)

    rows = matched_rows(result)
    both = [r for r in rows if r["fav_15"] >= 25 * BPS and r["adv_15"] >= 25 * BPS]
    only_target = [r for r in rows if r["fav_15"] >= 25 * BPS and r["adv_15"] < 25 * BPS]
    assert result.outcomes.unresolved == len(both)
    assert result.outcomes.target_first == len(only_target)
    assert sum(result.outcomes.model_dump().values()) == result.rows_used == 5
    evidence = memory_reader().lookup(
        symbol="ALFA", side="buy", mask=Frame.objects.get(symbol__ticker="ALFA").buy_mask,
        regime=result.frame.regime.id, horizons=(15,),
    )[15]  # fmt: skip
    assert result.key_target_reached_share == evidence.favourable_reached["25"]
    assert result.key_stop_reached_share == evidence.adverse_reached["25"]
    assert result.usage.lookup_cost == 1


def test_regime_is_the_benchmark_frames_and_hides_buckets_below_the_minimum(fed_world):
    result = research.market_regime(args=RegimeArgs(side="buy", horizon_minutes=15))

    benchmark = Frame.objects.get(symbol__ticker="SYNX")
    assert result.current.id == benchmark.regime
    assert result.current_source_time == benchmark.source_time
    table = memory_reader().regime_table(side="buy", horizon=15)
    shown = [r for r in table if r["distinct_sessions"] >= 3]
    assert [b.regime.id for b in result.buckets] == [r["regime"] for r in shown]
    assert [b.stats.sample_size for b in result.buckets] == [r["row_count"] for r in shown]
    assert result.buckets_below_minimum == len(table) - len(shown)
    assert result.last_verified_session.session == "2025-12-15"


def test_regime_when_the_market_is_closed_has_no_current_bucket(world):
    with time_machine.travel(world.replay.replace(hour=22), tick=False):
        result = research.market_regime(args=RegimeArgs())

    assert (result.current, result.frame_status) == (None, "market_closed")


def test_execution_conditions_report_volume_and_never_a_spread_fill_or_impact(fed_world):
    result = research.execution_conditions(args=ExecutionArgs(symbol="alfa"))

    stored = memory_reader().execution_conditions(symbol="ALFA")["volume_by_half_hour"]
    assert [b.model_dump() for b in result.volume_by_time_of_day] == stored
    assert result.volume_by_time_of_day[0].mean_volume_per_bar == 55675.34
    assert {result.spread.status, result.fill.status, result.market_impact.status} == {"not_available"}
    ready = memory_reader().coverage()["historical"]["sessions"]
    assert max(b.sessions for b in result.volume_by_time_of_day) > ready  # the warm-up sessions, counted
    assert "warm-up sessions included" in result.basis


def test_execution_conditions_of_an_unknown_symbol_are_not_available(fed_world):
    result = research.execution_conditions(args=ExecutionArgs(symbol="NOPE"))

    assert (result.availability, result.volume_by_time_of_day) == ("not_available", [])


def test_lineage_names_the_active_artifact_and_every_file_hash(fed_world):
    result = research.data_lineage(args=LineageArgs(), user=None)

    reader = memory_reader()
    assert (result.artifact_sha256, result.artifact_version) == (fed_world.sha256, reader.version)
    assert {f.name: f.sha256 for f in result.files} == {n: e["sha256"] for n, e in reader.manifest["files"].items()}
    assert (result.source, result.benchmark, result.strategy_count) == ("synthetic", "SYNX", 41)
    assert result.coverage.forward_overlay_freshness.status == "current"


def test_a_retried_client_request_id_replays_and_a_reused_one_conflicts(fed_world, user):
    args = SetupArgs(symbol="ALFA", side="buy", client_request_id="a-1")
    first = call_tool(user, "compare_historical_analogues", args)
    again = call_tool(user, "compare_historical_analogues", args)

    assert again == first
    assert UsageEvent.objects.count() == 1
    with pytest.raises(BillingError) as error:
        call_tool(user, "compare_historical_analogues", SetupArgs(symbol="ALFA", side="sell", client_request_id="a-1"))
    assert error.value.code == "idempotency_conflict"
    assert UsageEvent.objects.count() == 1


# Every research answer that carries an artifact reference, with arguments that answer on the fed world.
ARTIFACT_ANSWERS = {
    "get_current_confluence_leaders": LeadersArgs(side="buy"),
    "search_market_memory": SearchArgs(side="buy", horizon_minutes=15),
    "compare_historical_analogues": SetupArgs(symbol="ALFA", side="buy"),
    "explain_setup_failure": SetupArgs(symbol="ALFA", side="buy"),
    "compare_against_benchmark": SetupArgs(symbol="ALFA", side="buy"),
    "simulate_exit_policy": ExitPolicyArgs(symbol="ALFA", side="buy", stop_bps=25, target_bps=50),
    "get_market_regime": RegimeArgs(),
    "estimate_execution_conditions": ExecutionArgs(symbol="ALFA"),
}


def test_every_research_answer_names_the_source_of_its_artifacts_data(fed_world, user):
    provenances = {name: call_tool(user, name, args).provenance for name, args in ARTIFACT_ANSWERS.items()}

    version = memory_reader().version
    expected = {"artifact_version": version, "artifact_sha256": fed_world.sha256, "source": "synthetic"}
    assert {name: p.model_dump() for name, p in provenances.items()} == dict.fromkeys(ARTIFACT_ANSWERS, expected)


def test_a_research_answer_names_the_source_its_artifact_records_not_a_fixed_one(fed_world, user, monkeypatch):
    monkeypatch.setattr(memory_reader(), "source", "vendor", raising=False)  # as a build over vendor bars records it

    result = call_tool(user, "compare_historical_analogues", SetupArgs(symbol="ALFA", side="buy"))
    lineage = call_tool(user, "get_data_lineage", LineageArgs())

    assert (result.provenance.source, lineage.source) == ("vendor", "vendor")
