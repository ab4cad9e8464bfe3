from datetime import timedelta

import polars as pl
import pytest
import time_machine

from accounts import services as account_services
from evidence.marketdata.selectors import bars_read
from evidence.models import ResearchHypothesis, Symbol
from evidence.research import journal
from evidence.research.analysis import ResearchError
from evidence.schemas import RecordHypothesisArgs

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(db):
    return account_services.user_create(email="alice@example.com", password=None)


@pytest.fixture
def bob(db):
    return account_services.user_create(email="bob@example.com", password=None)


def record(user, **fields):
    values = {"symbol": "alfa", "side": "buy", "horizon_minutes": 15, "note": "VWAP reclaim holds", **fields}
    return journal.hypothesis_record(user=user, args=RecordHypothesisArgs(**values))


def test_review_of_a_verified_session_reports_the_realized_outcome_from_verified_bars(fed_world, alice):
    recorded_at = fed_world.replay - timedelta(days=1)  # same minute of the previous (verified) session
    with time_machine.travel(recorded_at, tick=False):
        hypothesis = record(alice, side="sell")
    review = journal.hypothesis_review(user=alice, hypothesis_id=hypothesis.hypothesis_id)

    decision = recorded_at - timedelta(minutes=1)
    assert hypothesis.decision_time == decision
    bars = bars_read(symbol=Symbol.objects.get(ticker="ALFA"), frequency="1m", start=decision,
                     end=decision + timedelta(minutes=15))  # fmt: skip
    entry, exit_price = bars.item(0, "close"), bars.item(-1, "close")
    window = bars.filter(pl.col("ts") > decision)
    assert review.outcome_status == "realized"
    assert (review.entry_price, review.exit_price) == (entry, exit_price)
    assert review.exit_time == decision + timedelta(minutes=15)
    assert review.realized_return_pct == round(-(exit_price / entry - 1) * 100, 6)
    assert review.max_adverse_excursion_pct == round((window.get_column("high").max() / entry - 1) * 100, 6)
    assert ResearchHypothesis.objects.get().outcome["outcome_status"] == "realized"


def test_review_in_the_provisional_session_is_not_mature(fed_world, alice):
    hypothesis = record(alice)
    review = journal.hypothesis_review(user=alice, hypothesis_id=hypothesis.hypothesis_id)

    assert review.outcome_status == "not_mature"
    assert review.reason == "The 2025-12-16 session is not verified yet; provisional bars are never used."
    assert (review.entry_price, review.realized_return_pct, review.verified_through) == (None, None, "2025-12-15")


def test_a_horizon_crossing_the_close_has_no_outcome(fed_world, alice):
    with time_machine.travel((fed_world.replay - timedelta(days=1)).replace(hour=20, minute=55), tick=False):
        hypothesis = record(alice, horizon_minutes=15)
    review = journal.hypothesis_review(user=alice, hypothesis_id=hypothesis.hypothesis_id)

    assert (review.outcome_status, review.realized_return_pct) == ("not_available", None)


def test_another_account_can_neither_review_nor_see_a_hypothesis(fed_world, alice, bob):
    hypothesis = record(alice)

    with pytest.raises(ResearchError) as error:
        journal.hypothesis_review(user=bob, hypothesis_id=hypothesis.hypothesis_id)
    assert error.value.code == "not_found"
    assert ResearchHypothesis.objects.get().reviewed_at is None


def test_retried_record_returns_the_same_note_and_a_reused_id_conflicts(fed_world, alice, bob):
    first = record(alice, client_request_id="n-1")
    again = record(alice, client_request_id="n-1")
    theirs = record(bob, client_request_id="n-1")  # ids are per account

    assert again == first
    assert theirs.hypothesis_id != first.hypothesis_id
    with pytest.raises(ResearchError) as error:
        record(alice, client_request_id="n-1", note="something else")
    assert error.value.code == "idempotency_conflict"
    assert ResearchHypothesis.objects.filter(user=alice).count() == 1


def test_unknown_symbol_is_refused_and_nothing_is_written(fed_world, alice):
    with pytest.raises(ResearchError):
        record(alice, symbol="NOPE")

    assert ResearchHypothesis.objects.exists() is False
