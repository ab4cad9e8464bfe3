"""A real beat is SIGKILLed and restarted while it keeps sending the period close and the meter-report drain every
half second to a real worker; prints what the ledger and the outbox show as JSON.

Run by test_beat_restart.py in a subprocess: a throwaway Leroy (SQLite in a temporary var dir) on the real Redis
broker (LEROY_TEST_REDIS_URL, fresh key prefix). Last month holds two overage charges queued for Stripe (the
worker talks to the offline fake Stripe) and unused credits. Every run of either task after the first must be a
no-op: one expiry per period, one send per meter report.
"""

import json
import os
import signal
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.throwaway import celery, environment, migrate, start, stop, wait_for

REDIS = os.environ["LEROY_TEST_REDIS_URL"]
PREFIX = f"leroy-beat-{uuid.uuid4().hex}:"
VAR = environment("beat-restart", REDIS_URL=REDIS)
RUNS = VAR / "task-runs.log"
OPTIONS = repr({"global_keyprefix": PREFIX})
WORKER = celery(
    f"""
from celery.signals import task_success
from billing import payments
from stripe import StripeClient
from tests.billing.fake_stripe import FakeStripeTransport
fake = FakeStripeTransport()
payments.stripe_client = lambda **_: StripeClient("sk_test_offline", http_client=fake, max_network_retries=0)

@task_success.connect
def record(sender=None, **_):
    with open({str(RUNS)!r}, "a") as runs:
        runs.write(f"{{sender.name}} {{time.time()}}\\n")

app.worker_main(["worker", "--concurrency", "1", "-Q", "billing", "--loglevel", "WARNING",
                 "--without-heartbeat", "--without-gossip", "--without-mingle"])
""",
    options=OPTIONS,
)
BEAT = celery(
    """
app.conf.beat_schedule = {
    "periods-close": {"task": "billing.periods_close", "schedule": 0.5},
    "meter-reports": {"task": "billing.meter_reports_send", "schedule": 0.5},
}
app.start(["beat", "--schedule", os.path.join(settings.LEROY_VAR_DIR, "beat-schedule"), "--loglevel", "WARNING"])
""",
    options=OPTIONS,
)


def runs_since(instant: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in RUNS.read_text().splitlines() if RUNS.exists() else []:
        name, at = line.split()
        if float(at) >= instant:
            counts[name] = counts.get(name, 0) + 1
    return counts


def main() -> None:
    import django

    django.setup()
    import redis
    import time_machine
    from django.db import transaction

    from accounts.services import user_create
    from billing import services
    from billing.models import Code, MeterReport, Period, Plan, StripeCustomer, Transfer
    from billing.selectors import ledger_drift
    from leroy.celery import app
    from leroy.clock import now

    app.conf.task_always_eager = True  # the charges' own enqueue runs here (no Stripe key: a no-op)
    migrate()
    user = user_create(email="beat@example.com", password="beat restart password 1")
    Plan.objects.filter(code="pro").update(included_lookups=0)
    services.plan_assign(user=user, plan=Plan.objects.get(code="pro"))
    StripeCustomer.objects.create(user=user, customer_id="cus_beat", subscription_id="sub_beat")
    last_month = now() - timedelta(days=40)
    with time_machine.travel(last_month, tick=False):
        with transaction.atomic():
            services.lookup_charge(user=user, tool="t", units=1, request_fingerprint="a", client_request_id=None)
        with transaction.atomic():
            services.lookup_charge(user=user, tool="t", units=2, request_fingerprint="b", client_request_id=None)
    assert MeterReport.objects.filter(status=MeterReport.Status.PENDING).count() == 2  # ledger-only here: unsent
    period = Period.objects.get(user=user, period_start=services.period_start_of(last_month))

    worker = start(WORKER)
    beats = [start(BEAT)]
    try:
        first_done = wait_for(
            lambda: (
                Period.objects.get(pk=period.pk).closed_at is not None
                and not MeterReport.objects.exclude(status=MeterReport.Status.SENT).exists()
            ),
            30,
        )
        closed_at = Period.objects.get(pk=period.pk).closed_at
        time.sleep(1.0)
        os.killpg(beats[0].pid, signal.SIGKILL)
        beats[0].wait(timeout=10)
        restarted_at = time.time()
        beats.append(start(BEAT))
        after_restart = wait_for(lambda: min(runs_since(restarted_at).values() or [0]) >= 2, 30)
        after = runs_since(restarted_at)
        print(
            json.dumps(
                {
                    "first_done": first_done,
                    "ran_again_after_restart": after_restart and len(after) == 2,
                    "expiries": Transfer.objects.filter(code=Code.EXPIRE, period_start=period.period_start).count(),
                    "closed_at_unchanged": Period.objects.get(pk=period.pk).closed_at == closed_at,
                    "reports": sorted(MeterReport.objects.values_list("status", "attempts")),
                    "ledger_drift": len(ledger_drift()),
                }
            )
        )
    finally:
        stop(*beats, worker)
        broker = redis.Redis.from_url(REDIS)
        for key in broker.scan_iter(PREFIX + "*"):
            broker.delete(key)


if __name__ == "__main__":
    main()
