import re
from datetime import timedelta

import pytest
import time_machine

from accounts import services as account_services
from billing import selectors as billing_selectors
from billing.models import Plan, UsageEvent
from billing.services import BillingError
from evidence.memory.reader import MemoryReader
from evidence.memory.selectors import memory_reader
from evidence.models import Frame
from evidence.research.geometry import InvalidSetup
from evidence.schemas import EvaluateArgs, SetupArgs
from tests.calls import call_tool

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(db):
    return account_services.user_create(email="agent@example.com", password=None)


def evaluate(user, **fields):
    return call_tool(user, "evaluate_current_setup", EvaluateArgs(**fields))


def numbers(text: str) -> set[str]:
    return set(re.findall(r"-?\d+(?:\.\d+)?", text))


def test_evaluated_evidence_traces_to_the_artifact(fed_world, user):
    result = evaluate(user, symbol="alfa", side="buy", holding_horizons=[15, 60])

    assert result.status == "evaluated"
    assert result.request.symbol == "ALFA"
    assert result.current_market_frame.frame_status == "available"
    assert result.current_market_frame.source_time == fed_world.replay - timedelta(minutes=1)
    quote = result.current_market_frame.quote
    frame = Frame.objects.get(symbol__ticker="ALFA")
    assert (quote.last, quote.bid, quote.ask, quote.spread_bps) == (frame.close, None, None, None)
    assert result.provenance.artifact_sha256 == fed_world.sha256
    assert result.provenance.evidence_status == "matched"
    assert result.usage.lookup_cost == 1
    assert result.usage.used_lookups == 1
    reader = memory_reader()
    active = next(s for s in result.active_confluence.sides if s.side == "buy")
    mask = sum(1 << i for i, s in enumerate(result.strategy_states) if s.state == "active")
    assert len(active.active_signals) == active.active_signal_count == bin(mask).count("1")
    expected = reader.lookup(
        symbol="ALFA", side="buy", mask=mask, regime=result.active_confluence.regime.id, horizons=(15, 60)
    )
    for row in result.historical_evidence:
        match = expected[row.horizon_minutes]
        assert row.sample_size == match.row_count
        assert row.average_return_pct == round(match.average_return_pct, 4)
        assert row.win_rate == round(match.win_rate, 4)
    for match in result.market_memory.matches:
        assert match.distinct_sessions >= reader.min_sessions
        assert match.match_strength.score == expected[match.horizon_minutes].tier
        assert match.row_count == expected[match.horizon_minutes].row_count  # that tier only: nothing pooled


def test_presentation_contains_no_number_missing_from_the_structured_result(fed_world, user):
    result = evaluate(user, symbol="ALFA", side="both", entry_price=100.0, stop_price=99.0, target_price=103.0)

    structured = result.model_dump_json(exclude={"presentation"})
    assert result.presentation.format == "markdown"
    assert numbers(result.presentation.text) <= numbers(structured)


def test_the_scorecard_states_how_many_symbols_each_row_pools_and_what_a_broader_tier_does_not_match(fed_world, user):
    from evidence.research.presentation import POOLED

    result = evaluate(user, symbol="ALFA", side="both")

    text = result.presentation.text
    available = [row for row in result.historical_evidence if row.availability == "available"]
    assert available
    for row in available:
        assert (
            f"| {row.horizon_minutes} | {row.match_strength.tier} (score {row.match_strength.score}) | "
            f"{row.sample_size} | {row.distinct_sessions} | {row.distinct_symbols} |"
        ) in text
    assert (POOLED in text) is any(row.match_strength.score < 5 for row in available)


def test_both_sides_cost_two_and_a_repeat_on_the_same_frame_is_a_free_cache_hit(fed_world, user):
    first = evaluate(user, symbol="ALFA", side="both")
    again = evaluate(user, symbol="ALFA", side="both")

    assert (first.usage.lookup_cost, first.usage.cache, first.usage.used_lookups) == (2, "miss", 2)
    assert (again.usage.lookup_cost, again.usage.cache, again.usage.used_lookups) == (0, "hit", 2)
    assert again.historical_evidence == first.historical_evidence
    assert again.evaluation_id != first.evaluation_id
    assert [e.cache_hit for e in UsageEvent.objects.order_by("pk")] == [False, True]


def test_a_two_lookup_call_with_one_left_is_refused_saying_what_it_costs_and_what_remains(fed_world, user):
    Plan.objects.filter(code="free").update(included_lookups=1)

    with pytest.raises(BillingError) as refused:
        evaluate(user, symbol="ALFA", side="both")

    month = f"{fed_world.replay:%Y-%m}"
    assert refused.value.code == "quota_exhausted"
    assert refused.value.message == (
        f"This call costs 2 lookups and only 1 of the Free plan's included lookups for {month} remains. "
        "Upgrade to a paid plan or wait for the period to reset."
    )
    assert refused.value.details["lookups_remaining"] == 1
    assert UsageEvent.objects.exists() is False
    assert billing_selectors.lookup_usage(user=user)["lookups_remaining"] == 1


def test_a_call_with_no_lookup_left_is_refused_as_used_up(fed_world, user):
    Plan.objects.filter(code="free").update(included_lookups=2)
    evaluate(user, symbol="ALFA", side="both")

    with pytest.raises(BillingError) as refused:
        evaluate(user, symbol="BRVO", side="buy")

    month = f"{fed_world.replay:%Y-%m}"
    assert refused.value.message == (
        f"The Free plan's included lookups for {month} are used up. "
        "Upgrade to a paid plan or wait for the period to reset."
    )
    assert UsageEvent.objects.count() == 1
    assert billing_selectors.lookup_usage(user=user)["lookups_remaining"] == 0


def test_retry_with_the_same_client_request_id_replays_the_original_answer(fed_world, user):
    first = evaluate(user, symbol="ALFA", side="sell", client_request_id="retry-1")
    again = evaluate(user, symbol="ALFA", side="sell", client_request_id="retry-1")

    assert again == first
    assert UsageEvent.objects.count() == 1
    with pytest.raises(BillingError) as error:
        evaluate(user, symbol="ALFA", side="buy", client_request_id="retry-1")
    assert error.value.code == "idempotency_conflict"
    assert UsageEvent.objects.count() == 1


def test_unknown_symbol_is_unavailable_with_nothing_fabricated_and_free(fed_world, user):
    result = evaluate(user, symbol="NOPE", side="buy")

    assert result.status == "unavailable"
    assert result.current_market_frame.model_dump() == {
        "symbol": "NOPE",
        "source_time": None,
        "frame_status": "unavailable",
        "quote": {"bid": None, "ask": None, "last": None, "spread_bps": None},
    }
    assert result.market_memory is None and result.active_confluence is None and result.strategy_states == []
    assert {row.availability for row in result.historical_evidence} == {"not_available"}
    assert all(row.sample_size is None and row.win_rate is None for row in result.historical_evidence)
    assert result.provenance.evidence_status == "unavailable"
    assert "NOPE is not in Leroy's current verified read model." in result.presentation.text
    assert result.usage.lookup_cost == 0
    assert UsageEvent.objects.exists() is False


def test_closed_market_answers_in_plain_text_without_evaluating(world, user):
    after_close = world.replay.replace(hour=22, minute=0)
    with time_machine.travel(after_close, tick=False):
        result = evaluate(user, symbol="ALFA", side="buy")

    assert result.status == "unavailable"
    assert result.current_market_frame.frame_status == "market_closed"
    assert (result.presentation.format, result.presentation.state) == ("plain_text", "market_closed")
    assert result.market_memory is None
    assert UsageEvent.objects.exists() is False


def test_stale_frame_still_shows_verified_history(fed_world, user):
    with time_machine.travel(fed_world.replay + timedelta(minutes=10), tick=False):
        result = evaluate(user, symbol="ALFA", side="buy")

    assert result.status == "stale_frame"
    assert result.current_market_frame.frame_status == "stale"
    assert result.presentation.state == "stale_frame"
    assert any(row.availability == "available" for row in result.historical_evidence)
    assert result.usage.lookup_cost == 0  # a stale frame is not usable: its history is shown, not charged
    assert UsageEvent.objects.exists() is False


def test_no_frame_yet_in_the_session_is_unavailable(world, user):
    with time_machine.travel(world.replay, tick=False):
        result = evaluate(user, symbol="ALFA", side="buy")

    assert result.status == "unavailable"
    assert result.historical_evidence[0].reason == "No verified frame for ALFA in the current session yet."
    assert "No verified frame for ALFA in the current session yet." in result.presentation.text
    assert "not in Leroy's current verified read model" not in result.presentation.text
    assert UsageEvent.objects.exists() is False


def test_a_frame_still_warming_up_is_unavailable_and_free_here_and_in_the_research_tools(fed_world, user):
    Frame.objects.filter(symbol__ticker="ALFA").update(ready=False)

    result = evaluate(user, symbol="ALFA", side="buy")
    analogues = call_tool(user, "compare_historical_analogues", SetupArgs(symbol="ALFA", side="buy"))

    frame = result.current_market_frame
    assert (result.status, frame.frame_status, frame.source_time, result.provenance.evidence_status) == (
        "unavailable",
        "unavailable",
        None,
        "unavailable",
    )
    assert result.historical_evidence[0].reason == "The current frame of ALFA has not completed its warm-up."
    assert (analogues.status, analogues.frame.frame_status, analogues.reason) == (
        "unavailable",
        "unavailable",
        "The current frame of ALFA has not completed its warm-up.",
    )
    assert UsageEvent.objects.exists() is False


def test_levels_against_the_direction_are_refused_before_any_charge(fed_world, user):
    with pytest.raises(InvalidSetup):
        evaluate(user, symbol="ALFA", side="buy", entry_price=100.0, stop_price=101.0)

    assert UsageEvent.objects.exists() is False


def test_a_behind_overlay_is_withheld_and_its_lag_stated(fed_world, user, monkeypatch):
    behind = {"status": "behind", "last_verified_session": "2025-12-12", "lag_sessions": 2}
    monkeypatch.setattr(MemoryReader, "freshness", lambda self, at: behind)

    result = evaluate(user, symbol="ALFA", side="buy")

    assert {m.source for m in result.market_memory.matches} <= {"historical"}
    freshness = result.market_memory.coverage.forward_overlay_freshness
    assert (freshness.status, freshness.lag_sessions) == ("behind", 2)
    assert (
        result.strategy_coverage.forward_overlay_freshness,
        result.strategy_coverage.forward_overlay_lag_sessions,
    ) == ("behind", 2)


def test_a_repeat_after_the_frame_went_stale_is_answered_anew_as_stale(fed_world, user):
    fresh = evaluate(user, symbol="ALFA", side="buy")
    with time_machine.travel(fed_world.replay + timedelta(minutes=10), tick=False):  # a halt: no newer frame
        again = evaluate(user, symbol="ALFA", side="buy")

    assert (fresh.status, fresh.current_market_frame.frame_status, fresh.usage.cache) == (
        "evaluated",
        "available",
        "miss",
    )
    assert (again.status, again.current_market_frame.frame_status, again.usage.cache) == (
        "stale_frame",
        "stale",
        "miss",
    )
    assert again.current_market_frame.source_time == fresh.current_market_frame.source_time


def test_a_horizon_that_would_end_past_todays_close_shows_no_history(world, user):
    from evidence.live import frames
    from evidence.marketdata import calendar

    close = frames.open_session(world.replay).close
    near_close = close - timedelta(minutes=10)  # the frame's bar starts at close - 11 min: 5 minutes still fit
    with time_machine.travel(near_close, tick=False):
        frames.replay_tick()
        frames.frames_refresh()
        result = evaluate(user, symbol="ALFA", side="buy")

    by_horizon = {row.horizon_minutes: row for row in result.historical_evidence}
    assert result.current_market_frame.source_time == close - timedelta(minutes=11)
    assert [h for h, row in by_horizon.items() if row.reason == calendar.HORIZON_CROSSES_CLOSE] == [15, 30, 60]
    assert {by_horizon[h].availability for h in (15, 30, 60)} == {"not_available"}
    assert {by_horizon[h].sample_size for h in (15, 30, 60)} == {None}
    assert by_horizon[5].reason != calendar.HORIZON_CROSSES_CLOSE
    assert [m.horizon_minutes for m in result.market_memory.matches if m.horizon_minutes != 5] == []


def test_a_stale_frames_horizons_count_from_now_not_from_its_bar(world, user):
    from evidence.live import frames
    from evidence.marketdata import calendar

    close = frames.open_session(world.replay).close
    with time_machine.travel(close - timedelta(minutes=30), tick=False):  # the frame's bar starts at close - 31 min
        frames.replay_tick()
        frames.frames_refresh()
    with time_machine.travel(close - timedelta(minutes=10), tick=False):  # no newer frame: a halt
        result = evaluate(user, symbol="ALFA", side="buy")

    by_horizon = {row.horizon_minutes: row for row in result.historical_evidence}
    assert (result.status, result.current_market_frame.source_time) == ("stale_frame", close - timedelta(minutes=31))
    assert [h for h, row in by_horizon.items() if row.reason == calendar.HORIZON_CROSSES_CLOSE] == [15, 30, 60]
    assert [m.horizon_minutes for m in result.market_memory.matches if m.horizon_minutes != 5] == []
    assert UsageEvent.objects.exists() is False


def test_minutes_before_the_close_every_horizon_shows_no_history_and_costs_nothing(world, user):
    from evidence.live import frames
    from evidence.marketdata import calendar

    close = frames.open_session(world.replay).close
    with time_machine.travel(close - timedelta(minutes=2), tick=False):  # the frame's bar starts at close - 3 min
        frames.replay_tick()
        frames.frames_refresh()
        result = evaluate(user, symbol="ALFA", side="buy")

    assert {row.reason for row in result.historical_evidence} == {calendar.HORIZON_CROSSES_CLOSE}
    assert result.market_memory.matches == []
    assert (result.usage.lookup_cost, result.usage.used_lookups) == (0, 0)


SYNTHETIC_NOTICE = "Data source: synthetic. Every figure here comes from generated demo data, not market history."
DISCLAIMER = "Historical observations are descriptive, not investment advice."


def test_an_evaluation_of_synthetic_data_says_so_in_its_provenance_and_at_the_end_of_its_text(fed_world, user):
    result = evaluate(user, symbol="ALFA", side="buy")

    reader = memory_reader()
    assert result.status == "evaluated"
    assert result.provenance.source == result.market_memory.lineage.source == "synthetic"
    assert result.presentation.text.endswith(
        f"\n\nEvidence: Market Memory {reader.version} · sha256 {fed_world.sha256} · source synthetic"
        f"\n\n{SYNTHETIC_NOTICE}\n\n{DISCLAIMER}"
    )


def test_an_unavailable_evaluation_without_market_memory_still_names_its_synthetic_source(fed_world, user):
    result = evaluate(user, symbol="NOPE", side="buy")

    assert result.market_memory is None
    assert result.provenance.source == "synthetic"
    assert result.presentation.text.endswith(f"\n\n{SYNTHETIC_NOTICE}\n\n{DISCLAIMER}")


def test_a_closed_market_answer_of_synthetic_data_says_so_in_its_plain_text(world, user):
    with time_machine.travel(world.replay.replace(hour=22, minute=0), tick=False):
        result = evaluate(user, symbol="ALFA", side="buy")

    assert result.provenance.source == "synthetic"
    assert result.presentation.text == (
        "ALFA: regular-session trading is closed. Leroy evaluates current setups only while the regular session is "
        f"open; this is not a setup evaluation. {SYNTHETIC_NOTICE} {DISCLAIMER}"
    )


def test_a_vendor_artifact_is_named_vendor_and_its_text_carries_no_synthetic_notice(fed_world, user, monkeypatch):
    monkeypatch.setattr(memory_reader(), "source", "vendor", raising=False)  # as a build over vendor bars records it

    result = evaluate(user, symbol="ALFA", side="buy")

    assert result.provenance.source == result.market_memory.lineage.source == "vendor"
    assert "synthetic" not in result.presentation.text
    assert result.presentation.text.endswith(f" · sha256 {fed_world.sha256} · source vendor\n\n{DISCLAIMER}")
