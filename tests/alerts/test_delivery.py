import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.test import override_settings

from alerts import services, tasks, webhooks
from alerts.models import AlertRule, Attempt, Delivery
from tests.alerts.conftest import make_rule
from tests.alerts.receiver import Dripper, verify
from tests.conftest import sending_to

pytestmark = pytest.mark.django_db(transaction=True)

OPEN = datetime(2026, 7, 1, 15, 0, tzinfo=UTC)  # a Wednesday, mid-session (the close is 20:00Z)
ROOT = Path(__file__).resolve().parents[2]


def matched(rule: AlertRule, at: datetime, ticker: str = "ALFA") -> Delivery | None:
    """A match of `rule` on the frame one minute before `at` (the evidence content does not matter here)."""
    frame_time = (at - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    return services._delivery_for_match(rule, {"symbol": ticker, "frame_time": frame_time, "side": rule.side}, at)


def run_retries(traveller, delivery: Delivery) -> Delivery:
    """Move the clock to each next attempt and let beat's sweeper enqueue it, until the delivery settles."""
    for _ in range(100):
        delivery.refresh_from_db()
        if delivery.status != "pending":
            return delivery
        traveller.move_to(delivery.next_attempt_at)
        tasks.deliveries_sweep.delay()
    raise AssertionError("the delivery never settled")


def test_a_matched_delivery_reaches_an_https_receiver_with_a_valid_signature(owner, tls_receiver):
    with time_machine.travel(OPEN, tick=False):
        rule, secret = make_rule(owner, tls_receiver.url(host="localhost"))
        delivery = matched(rule, OPEN)

    delivery.refresh_from_db()
    [received] = tls_receiver.requests
    assert delivery.status == "delivered"
    assert verify(secret, received)
    assert received.headers["x-leroy-delivery"] == delivery.public_id
    assert received.headers["x-leroy-event"] == "alert.matched"
    assert received.headers["content-type"] == "application/json"
    assert json.loads(received.body)["expires_at"] == "2026-07-01T16:00:00Z"  # 60 min after the frame closed


def test_a_receiver_that_is_down_gets_backoff_retries_until_the_window_ends_then_the_rule_pauses(owner, receiver):
    receiver.stop()  # nothing listens on the port any more: every attempt is refused
    with (
        override_settings(LEROY_ALERTS_PAUSE_AFTER_FAILURES=2, LEROY_ALERTS_DELIVERY_WINDOW_MINUTES=5),
        time_machine.travel(OPEN, tick=False) as traveller,
    ):
        rule, _ = make_rule(owner, receiver.url())
        first = run_retries(traveller, matched(rule, OPEN))
        rule.refresh_from_db()
        after_one = (rule.status, rule.consecutive_failures)
        second_at = OPEN + timedelta(minutes=10)
        traveller.move_to(second_at)
        second = run_retries(traveller, matched(rule, second_at))
        traveller.move_to(OPEN + timedelta(minutes=20))
        third = matched(rule, OPEN + timedelta(minutes=20))

    attempts = list(Attempt.objects.filter(delivery=first).order_by("number"))
    assert first.status == "failed" and second.status == "failed"
    assert len(attempts) >= 3
    assert {a.outcome for a in attempts} == {"connection_error"}
    assert all(a.finished_at is not None for a in attempts)
    # Full jitter: each wait is at most base * 2^(n-1) seconds (and at least the 1 s floor).
    for n, (earlier, later) in enumerate(itertools.pairwise(attempts), start=1):
        assert 1 <= (later.started_at - earlier.started_at).total_seconds() <= 10 * 2 ** (n - 1)
    assert attempts[-1].started_at < first.expires_at == OPEN + timedelta(minutes=5)
    assert after_one == ("active", 1)
    rule.refresh_from_db()
    assert rule.status == "paused"
    assert rule.status_reason.startswith("Paused automatically: 2 deliveries in a row failed (last: ")
    assert third is None  # a paused rule gets no new deliveries
    assert Delivery.objects.count() == 2


def test_410_gone_disables_the_rule_at_once(owner, receiver):
    receiver.behaviour.status = 410
    with time_machine.travel(OPEN, tick=False):
        rule, _ = make_rule(owner, receiver.url())
        delivery = matched(rule, OPEN)
        tasks.deliveries_sweep.delay()

    delivery.refresh_from_db()
    rule.refresh_from_db()
    assert (delivery.status, delivery.attempt_count, delivery.last_status_code) == ("failed", 1, 410)
    assert rule.status == "disabled"
    assert rule.status_reason == "Disabled: the receiver answered 410 Gone at 2026-07-01T15:00:00Z."
    assert len(receiver.requests) == 1


def test_a_success_after_failures_delivers_and_resets_the_failure_count(owner, receiver):
    receiver.behaviour.status = 503
    receiver.behaviour.headers = {"Retry-After": "30"}
    with time_machine.travel(OPEN, tick=False) as traveller:
        rule, secret = make_rule(owner, receiver.url())
        AlertRule.objects.filter(pk=rule.pk).update(consecutive_failures=3)
        delivery = matched(rule, OPEN)
        delivery.refresh_from_db()
        waited = (delivery.next_attempt_at - OPEN).total_seconds()
        receiver.behaviour.status, receiver.behaviour.headers = 200, {}
        delivery = run_retries(traveller, delivery)

    rule.refresh_from_db()
    assert waited >= 30  # Retry-After is honoured
    assert (delivery.status, delivery.attempt_count) == ("delivered", 2)
    assert rule.consecutive_failures == 0
    assert [r.headers["x-leroy-delivery"] for r in receiver.requests] == [delivery.public_id] * 2
    assert receiver.requests[0].body == receiver.requests[1].body
    assert all(verify(secret, r) for r in receiver.requests)


def test_duplicate_and_early_sends_are_no_ops(owner, receiver):
    with time_machine.travel(OPEN, tick=False):
        rule, _ = make_rule(owner, receiver.url())
        delivery = matched(rule, OPEN)
        for _ in range(3):
            tasks.delivery_send.delay(delivery.pk)

    assert Attempt.objects.count() == 1
    assert len(receiver.requests) == 1


def test_a_worker_killed_mid_delivery_leaves_it_retryable(owner, receiver, monkeypatch):
    # given a pending delivery whose receiver holds the request open
    monkeypatch.setattr(tasks.delivery_send, "delay", lambda *args: None)  # created, not yet sent
    rule, secret = make_rule(owner, receiver.url())
    delivery = matched(rule, datetime.now(UTC))
    receiver.behaviour.hang = threading.Event()
    db = connection.settings_dict
    url = (
        f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        if connection.vendor == "postgresql"
        else f"sqlite:///{db['NAME']}"
    )
    env = {
        **os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": url,
        "LEROY_WEBHOOK_ALLOW_HOSTS": f"127.0.0.1:{receiver.port}",
    }  # fmt: skip
    code = (
        "import django; django.setup(); from alerts import services; "
        f"services.delivery_attempt(delivery_id={delivery.pk})"
    )
    # when a worker process is killed while its attempt is in flight
    worker = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while not receiver.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    receiver.behaviour.hang.set()
    receiver.behaviour.hang = None
    delivery.refresh_from_db()
    in_flight = (delivery.status, delivery.attempt_count, delivery.lease_until is not None)
    swept_while_leased = services.deliveries_sweep()
    # then, once its lease has run out, the sweeper retries it with the same id and body
    monkeypatch.undo()
    with time_machine.travel(delivery.lease_until + timedelta(seconds=1), tick=False):
        tasks.deliveries_sweep.delay()

    delivery.refresh_from_db()
    attempts = list(Attempt.objects.filter(delivery=delivery).order_by("number"))
    assert len(receiver.requests) == 2
    assert in_flight == ("pending", 1, True)
    assert swept_while_leased == 0
    assert [a.outcome for a in attempts] == ["interrupted", "success"]
    assert delivery.status == "delivered"
    assert {r.headers["x-leroy-delivery"] for r in receiver.requests} == {delivery.public_id}
    assert receiver.requests[0].body == receiver.requests[1].body
    assert all(verify(secret, r) for r in receiver.requests)


def test_deleting_a_rule_leaves_queued_sends_with_nothing_to_do(owner, receiver, monkeypatch):
    monkeypatch.setattr(tasks.delivery_send, "delay", lambda *args: None)
    with time_machine.travel(OPEN, tick=False):
        rule, _ = make_rule(owner, receiver.url())
        delivery = matched(rule, OPEN)
        services.rule_delete(user=owner, alert_id=rule.public_id)
        assert services.delivery_attempt(delivery_id=delivery.pk) is None

    assert receiver.requests == []


def test_matches_beyond_the_hourly_limit_are_counted_not_sent(owner, receiver):
    with override_settings(LEROY_ALERTS_DELIVERIES_PER_HOUR=1), time_machine.travel(OPEN, tick=False) as traveller:
        rule, _ = make_rule(owner, receiver.url())
        first = matched(rule, OPEN)
        traveller.move_to(OPEN + timedelta(minutes=1))
        second = matched(rule, OPEN + timedelta(minutes=1))

    rule.refresh_from_db()
    assert first is not None and second is None
    assert rule.suppressed_matches == 1
    assert len(receiver.requests) == 1


def test_the_rules_expiry_ends_the_delivery_window(owner, receiver):
    with time_machine.travel(OPEN, tick=False):
        rule, _ = make_rule(owner, receiver.url(), expires_at=OPEN + timedelta(minutes=7))
        delivery = matched(rule, OPEN)

    assert delivery.expires_at == OPEN + timedelta(minutes=7)


def test_a_match_the_broker_does_not_take_stays_pending_and_the_sweep_sends_it(owner, receiver, dead_redis_url):
    with time_machine.travel(OPEN, tick=False):
        rule, _ = make_rule(owner, receiver.url())
        with sending_to(dead_redis_url):
            delivery = matched(rule, OPEN)  # the evaluation's commit stands; the send is left to the sweep
        delivery.refresh_from_db()
        pending = (delivery.status, delivery.next_attempt_at, Attempt.objects.count(), len(receiver.requests))
        tasks.deliveries_sweep.delay()

    delivery.refresh_from_db()
    assert pending == ("pending", OPEN, 0, 0)
    assert (delivery.status, Attempt.objects.count(), len(receiver.requests)) == ("delivered", 1, 1)


@pytest.mark.django_db(transaction=True)
def test_concurrent_redeliveries_and_tests_never_exceed_the_hourly_limit(owner, receiver):
    from django.db import connections

    rule, _ = make_rule(owner, receiver.url())
    old = datetime.now(UTC) - timedelta(hours=2)  # outside the hour: they count for nothing
    deliveries = [
        Delivery.objects.create(public_id=f"dlv_old{i}", rule=rule, event=Delivery.Event.TEST, body="{}",
                                status=Delivery.Status.FAILED, expires_at=old, created_at=old)
        for i in range(8)
    ]  # fmt: skip
    barrier, outcomes = threading.Barrier(12), []

    def act(index: int) -> None:
        barrier.wait()
        try:
            if index < 8:
                services.redeliver(user=owner, delivery_id=deliveries[index].public_id)
            else:
                services.send_test_event(user=owner, alert_id=rule.public_id)
            outcomes.append("sent")
        except services.AlertError as refusal:
            outcomes.append(refusal.code)
        finally:
            connections.close_all()

    with override_settings(LEROY_ALERTS_DELIVERIES_PER_HOUR=5):
        threads = [threading.Thread(target=act, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    sent = outcomes.count("sent")  # one manual send in flight per account: how many overlap is the scheduler's
    assert 1 <= sent <= 5
    assert set(outcomes) - {"sent"} <= {"rate_limited", "delivery_in_flight"}
    assert Attempt.objects.count() == len(receiver.requests) == sent


# A status line and a header long enough that dripping it takes far longer than the attempt may.
SLOW_ANSWER = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
# A TLS handshake record header announcing 16,384 bytes: a client in its handshake waits for all of them.
SLOW_HANDSHAKE = b"\x16\x03\x03\x40\x00" + b"\x00" * 200


@pytest.mark.parametrize(("scheme", "answer"), [("http", SLOW_ANSWER), ("https", SLOW_HANDSHAKE)])
def test_a_receiver_answering_a_byte_at_a_time_is_cut_at_the_attempts_total_timeout(scheme, answer):
    dripper = Dripper(answer, pause=0.2)
    allowed = [f"127.0.0.1:{dripper.port}", f"localhost:{dripper.port}"]
    try:
        with override_settings(
            LEROY_WEBHOOK_ALLOW_HOSTS=allowed, LEROY_WEBHOOK_READ_TIMEOUT=1.0, LEROY_WEBHOOK_TOTAL_TIMEOUT=1.5
        ):
            endpoint = webhooks.endpoint_check(f"{scheme}://localhost:{dripper.port}/hook")
            started = time.monotonic()
            sent = webhooks.post(endpoint, body=b"{}", headers={"Content-Type": "application/json"})
            took = time.monotonic() - started
    finally:
        dripper.stop()

    assert (sent.status_code, sent.outcome) == (None, "timeout")
    assert sent.error == "TimeoutError: no complete answer within 1.5 s in all"
    assert 1.5 <= took < 2.5


def test_a_test_delivery_to_a_dripping_receiver_ends_at_the_total_timeout_and_records_it(owner):
    dripper = Dripper(SLOW_ANSWER, pause=0.2)
    try:
        with override_settings(
            LEROY_WEBHOOK_ALLOW_HOSTS=[f"127.0.0.1:{dripper.port}"],
            LEROY_WEBHOOK_READ_TIMEOUT=1.0,
            LEROY_WEBHOOK_TOTAL_TIMEOUT=1.5,
        ):
            rule, _ = make_rule(owner, f"http://127.0.0.1:{dripper.port}/hook")
            delivery = services.send_test_event(user=owner, alert_id=rule.public_id)
    finally:
        dripper.stop()

    [attempt] = Attempt.objects.filter(delivery=delivery)
    assert (attempt.outcome, attempt.status_code) == ("timeout", None)
    assert attempt.error == "TimeoutError: no complete answer within 1.5 s in all"
    assert 1400 <= attempt.duration_ms < 2500  # from the POST, a moment after the deadline started


def test_a_second_test_or_redelivery_while_one_is_in_flight_is_refused_and_writes_nothing(owner, receiver):
    first, _ = make_rule(owner, receiver.url())
    second, _ = make_rule(owner, receiver.url(path="/other"))
    earlier = services.send_test_event(user=owner, alert_id=second.public_id)
    receiver.behaviour.hang = threading.Event()
    in_flight = threading.Thread(target=services.send_test_event, kwargs={"user": owner, "alert_id": first.public_id})
    in_flight.start()
    try:
        for _ in range(100):  # until the receiver holds the first test
            if len(receiver.requests) == 2:
                break
            time.sleep(0.05)
        deliveries, attempts = Delivery.objects.count(), Attempt.objects.count()
        with pytest.raises(services.AlertError) as test:
            services.send_test_event(user=owner, alert_id=second.public_id)
        with pytest.raises(services.AlertError) as redelivery:
            services.redeliver(user=owner, delivery_id=earlier.public_id)
        refused = (Delivery.objects.count(), Attempt.objects.count(), len(receiver.requests))
    finally:
        receiver.behaviour.hang.set()
        in_flight.join()

    for refusal in (test.value, redelivery.value):
        assert (refusal.code, refusal.details["retry_after_seconds"]) == ("delivery_in_flight", 5)
        assert refusal.message == "Another test or redelivery of this account is in flight; try again when it ends."
    assert refused == (deliveries, attempts, 2)
    assert services.send_test_event(user=owner, alert_id=second.public_id).status == "delivered"


def test_a_suspended_accounts_pending_deliveries_are_given_up_unsent(owner, receiver, monkeypatch):
    monkeypatch.setattr(tasks.delivery_send, "delay", lambda *args: None)
    with time_machine.travel(OPEN, tick=False):
        rule, _ = make_rule(owner, receiver.url())
        delivery = matched(rule, OPEN)
        owner.is_active = False  # an operator unticks "active" in the admin
        owner.save(update_fields=["is_active"])

        assert services.delivery_attempt(delivery_id=delivery.pk) is None

    delivery.refresh_from_db()
    rule.refresh_from_db()
    assert receiver.requests == []
    assert (delivery.status, delivery.attempt_count) == ("failed", 0)
    assert delivery.last_error == "The account is suspended or closed."
    assert (rule.status, rule.consecutive_failures) == ("active", 0)
    assert Attempt.objects.filter(delivery=delivery).exists() is False
