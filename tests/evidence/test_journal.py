from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
import time_machine
from django.conf import settings

from accounts import services as account_services
from evidence.marketdata.selectors import bars_read
from evidence.models import ResearchHypothesis, Symbol
from evidence.research import journal
from evidence.research.analysis import ResearchError
from evidence.schemas import RecordHypothesisArgs
from tests.migrating import migrate_forward, model_before
from tests.races import race

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


@pytest.mark.parametrize("gap", [0, 7, 15])  # minutes after the decision minute: itself, inside, the exit
def test_a_window_with_a_minute_without_a_trade_has_no_outcome(fed_world, alice, monkeypatch, gap):
    recorded_at = fed_world.replay - timedelta(days=1)
    decision = recorded_at - timedelta(minutes=1)
    with time_machine.travel(recorded_at, tick=False):
        hypothesis = record(alice)
    traded = journal.bars_read
    monkeypatch.setattr(
        journal, "bars_read", lambda **kw: traded(**kw).filter(pl.col("ts") != decision + timedelta(minutes=gap))
    )

    review = journal.hypothesis_review(user=alice, hypothesis_id=hypothesis.hypothesis_id)

    assert (review.outcome_status, review.entry_price, review.exit_price, review.realized_return_pct) == (
        "not_available",
        None,
        None,
        None,
    )
    assert review.reason == (
        "A minute from the decision to the exit had no trade: as for Market Memory labels, no outcome."
    )


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
    assert (first.hypothesis_id, theirs.hypothesis_id) == (1, 1)  # each account's journal numbers its own notes
    with pytest.raises(ResearchError) as error:
        record(alice, client_request_id="n-1", note="something else")
    assert error.value.code == "idempotency_conflict"
    assert ResearchHypothesis.objects.filter(user=alice).count() == 1


def test_unknown_symbol_is_refused_and_nothing_is_written(fed_world, alice):
    with pytest.raises(ResearchError):
        record(alice, symbol="NOPE")

    assert ResearchHypothesis.objects.exists() is False


def test_each_account_numbers_its_own_journal_and_a_number_reaches_only_the_callers_note(fed_world, alice, bob):
    # The table's own ids counted every account's notes: a second account's first note was hypothesis 3.
    first, second = record(alice), record(alice, note="second")
    theirs = record(bob, note="bob's")

    with pytest.raises(ResearchError) as error:
        journal.hypothesis_review(user=bob, hypothesis_id=2)
    review = journal.hypothesis_review(user=bob, hypothesis_id=1)

    assert [first.hypothesis_id, second.hypothesis_id, theirs.hypothesis_id] == [1, 2, 1]
    assert error.value.code == "not_found"
    assert review.hypothesis.note == "bob's"
    assert list(ResearchHypothesis.objects.filter(user=alice).values_list("reviewed_at", flat=True)) == [None, None]


@pytest.mark.django_db(transaction=True)
def test_migrating_numbers_each_accounts_existing_notes_from_one_in_the_order_they_were_written(alice, bob):
    old = model_before(("evidence", "0008_log_timestamp"), "ResearchHypothesis")
    written = [
        old.objects.create(user_id=user.pk, symbol="ALFA", side="buy", horizon_minutes=5, note=note,
                           recorded_at=datetime(2026, 5, 19, 14, 30, tzinfo=UTC)).pk
        for user, note in [(alice, "a1"), (bob, "b1"), (alice, "a2"), (alice, "a3"), (bob, "b2")]
    ]  # fmt: skip
    migrate_forward(("evidence", "0009_hypothesis_numbers"))

    numbered = ResearchHypothesis.objects.filter(pk__in=written).order_by("pk").values_list("note", "number")
    assert list(numbered) == [("a1", 1), ("b1", 1), ("a2", 2), ("a3", 3), ("b2", 2)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="row locks need PostgreSQL")
def test_notes_recorded_at_once_take_distinct_numbers_in_one_journal(alice):
    Symbol.objects.create(ticker="ALFA")

    results, _ = race(8, 3, lambda client, call: record(alice, note=f"{client}-{call}").hypothesis_id)

    assert sorted(results) == list(range(1, 25))


def test_the_journal_page_keeps_a_notes_line_breaks_and_escapes_it(fed_world, alice, client):
    record(alice, note="line one\n<b>line two</b>")
    client.force_login(alice)

    page = client.get("/account/journal/").content.decode()

    assert "<td>line one<br>&lt;b&gt;line two&lt;/b&gt;</td>" in page
