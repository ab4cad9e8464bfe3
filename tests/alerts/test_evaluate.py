import json
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connections

from alerts import services
from alerts.models import AlertRule, Delivery, FrameCursor
from billing.models import UsageEvent
from evidence.memory.selectors import memory_reader
from evidence.schemas import EvaluateArgs
from tests.alerts.conftest import make_rule
from tests.alerts.receiver import verify
from tests.calls import call_tool

pytestmark = pytest.mark.django_db


def alfa_rule(owner, receiver, **fields):
    return make_rule(owner, receiver.url(), symbols=["alfa"], universe=False, **fields)


def test_a_matching_frame_sends_one_signed_delivery_with_the_evaluations_evidence(
    fed_world, owner, receiver, django_capture_on_commit_callbacks
):
    rule, secret = alfa_rule(owner, receiver)

    with django_capture_on_commit_callbacks(execute=True):
        created = services.frames_evaluate()

    assert created == 1
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.event, delivery.ticker) == ("delivered", "alert.matched", "ALFA")
    assert delivery.frame_time == fed_world.replay - timedelta(minutes=1)
    [received] = receiver.requests
    assert verify(secret, received)
    assert received.headers["x-leroy-event"] == "alert.matched"
    body = json.loads(received.body)
    assert received.body.decode() == delivery.body
    assert body["type"] == "alert.matched" and body["delivery_id"] == delivery.public_id
    assert body["alert_id"] == rule.public_id
    assert body["research_boundary"] == {
        "broker_write_authority": "none", "paper_trading": False, "investment_advice": False, "live_order": False,
    }  # fmt: skip
    # The same evidence evaluate_current_setup gives for this side and horizon (one implementation, here uncharged).
    reference = call_tool(
        owner, "evaluate_current_setup", EvaluateArgs(symbol="ALFA", side="buy", holding_horizons=[15])
    )
    [row] = reference.historical_evidence
    [match] = [m for m in reference.market_memory.matches if m.source == "historical"]
    data = body["data"]
    assert (data["symbol"], data["side"], data["horizon_minutes"]) == ("ALFA", "buy", 15)
    assert data["frame_time"] == (fed_world.replay - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    assert data["sample_size"] == row.sample_size
    assert data["win_rate"] == row.win_rate
    assert data["average_return_pct"] == row.average_return_pct
    assert data["match_strength"] == match.match_strength.model_dump()
    assert data["distinct_sessions"] == match.distinct_sessions
    assert data["artifact_sha256"] == fed_world.sha256 == reference.provenance.artifact_sha256
    assert data["evaluation_id"].startswith("eval_") and data["evaluation_id"] != reference.evaluation_id
    # Only the reference call above was metered; the alert's evaluation cost nothing.
    assert UsageEvent.objects.count() == 1


def test_a_frame_is_evaluated_once_and_delivered_at_most_once(fed_world, owner, receiver):
    alfa_rule(owner, receiver)

    first = services.frames_evaluate()
    again = services.frames_evaluate()
    FrameCursor.objects.all().delete()  # even without the watermark, the unique constraint holds
    after_reset = services.frames_evaluate()

    assert (first, again, after_reset) == (1, 0, 0)
    assert Delivery.objects.count() == 1


@pytest.mark.parametrize(
    "thresholds",
    [{"min_win_rate": 1.0}, {"min_average_return_pct": 100.0}, {"min_active_signals": 64}, {"tier_above": 1}],
    ids=["win_rate", "average_return", "active_signals", "match_tier"],
)
def test_no_delivery_when_a_threshold_fails(fed_world, owner, receiver, thresholds):
    if "tier_above" in thresholds:
        reference = call_tool(
            owner, "evaluate_current_setup", EvaluateArgs(symbol="ALFA", side="buy", holding_horizons=[15])
        )
        [match] = [m for m in reference.market_memory.matches if m.source == "historical"]
        # The world is built so a stronger tier exists to demand; were it not, this case would prove nothing.
        assert match.match_strength.score < 5
        thresholds = {"min_match_tier": match.match_strength.score + 1}
    alfa_rule(owner, receiver, **thresholds)

    assert services.frames_evaluate() == 0
    assert Delivery.objects.exists() is False
    assert receiver.requests == []


def test_no_delivery_on_evidence_below_the_minimum_sample(fed_world, owner, receiver, monkeypatch):
    alfa_rule(owner, receiver)
    monkeypatch.setattr(memory_reader(), "min_sessions", 10**6)  # every tier now falls short of the gate

    assert services.frames_evaluate() == 0
    assert Delivery.objects.exists() is False


def test_no_delivery_on_a_stale_frame(fed_world, owner, receiver):
    alfa_rule(owner, receiver)

    with time_machine.travel(fed_world.replay + timedelta(minutes=10), tick=False):
        assert services.frames_evaluate() == 0

    assert Delivery.objects.exists() is False


def test_no_delivery_when_the_market_is_closed(fed_world, owner, receiver):
    alfa_rule(owner, receiver)

    with time_machine.travel(fed_world.replay.replace(hour=23), tick=False):
        assert services.frames_evaluate() == 0

    assert Delivery.objects.exists() is False


def test_paused_and_expired_rules_are_not_evaluated(fed_world, owner, receiver):
    paused, _ = alfa_rule(owner, receiver)
    services.rule_pause(user=owner, alert_id=paused.public_id)
    alfa_rule(owner, receiver, expires_at=fed_world.replay + timedelta(seconds=30))

    with time_machine.travel(fed_world.replay + timedelta(seconds=31), tick=False):
        assert services.frames_evaluate() == 0

    assert Delivery.objects.exists() is False


def test_a_suspended_accounts_rules_are_not_evaluated(fed_world, owner, receiver):
    alfa_rule(owner, receiver)
    owner.is_active = False  # an operator unticks "active" in the admin
    owner.save(update_fields=["is_active"])

    assert services.frames_evaluate() == 0

    assert Delivery.objects.exists() is False
    assert receiver.requests == []


def test_a_universe_rule_matches_every_followed_symbol_with_evidence(fed_world, owner, receiver):
    make_rule(owner, receiver.url())

    services.frames_evaluate()

    reference = {
        ticker: call_tool(
            owner, "evaluate_current_setup", EvaluateArgs(symbol=ticker, side="buy", holding_horizons=[15])
        )
        for ticker in FrameCursor.objects.values_list("ticker", flat=True)
    }
    expected = sorted(t for t, r in reference.items() if services.match_figures(AlertRule.objects.get(), r))
    assert expected  # the world has evidence for at least one followed symbol
    assert sorted(Delivery.objects.values_list("ticker", flat=True)) == expected


@pytest.mark.django_db(transaction=True)
def test_concurrent_evaluators_create_exactly_one_delivery_per_rule_and_frame(fed_world, owner, receiver):
    rules = [alfa_rule(owner, receiver)[0] for _ in range(2)]
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def evaluate() -> None:
        try:
            start.wait()
            services.frames_evaluate()
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=evaluate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert sorted(Delivery.objects.values_list("rule_id", flat=True)) == sorted(r.pk for r in rules)
    assert sorted(r.headers["x-leroy-delivery"] for r in receiver.requests) == sorted(
        Delivery.objects.values_list("public_id", flat=True)
    )


def test_a_delivery_names_the_source_of_its_artifacts_data(fed_world, owner, receiver):
    alfa_rule(owner, receiver)

    services.frames_evaluate()

    data = json.loads(Delivery.objects.get().body)["data"]
    assert (data["artifact_sha256"], data["source"]) == (fed_world.sha256, "synthetic")
