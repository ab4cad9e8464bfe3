"""A real Celery worker's *main* process is SIGKILLed while one backtest runs and another sits prefetched;
prints what became of both reports as JSON.

Run by test_worker_crash.py in a subprocess: a throwaway Leroy (SQLite in a temporary var dir) on the real Redis
broker (LEROY_TEST_REDIS_URL, under a fresh key prefix), production settings, a one-process worker prefetching two
messages. After the kill a new worker starts; the broker returns both unacknowledged messages once the visibility
timeout (2 s here, 15 min in production) has passed, at the worker's next sweep (every second here, 10 s in
production; a sweep the killed worker was inside delays the next by its lock's expiry, 3 s here, 5 min in
production): the one that was running fails as worker_lost and is refunded (never run twice), the prefetched one
runs once.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.throwaway import backtest_submit, backtest_world, celery, environment, start, stop, wait_for

REDIS = os.environ["LEROY_TEST_REDIS_URL"]
PREFIX = f"leroy-crash-{uuid.uuid4().hex}:"
environment("worker-crash", REDIS_URL=REDIS, LEROY_BROKER_VISIBILITY_TIMEOUT="2")
WORKER = celery(
    """
app.worker_main(["worker", "--concurrency", "1", "--prefetch-multiplier", "2", "-Q", "backtests",
                 "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle"])
""",
    # A sweep every second: the replacement's first one can come before the prefetched message is 2 s old.
    # A sweep holds a lock in Redis (kombu's unacked mutex, 5 min by default); killed inside one, the worker would
    # leave it held and the replacement would restore nothing for that long: it expires after 3 s here.
    options=repr({"global_keyprefix": PREFIX, "unacked_restore_interval": 1, "unacked_mutex_expire": 3}),
)
SPIN = "class Spin(bt.Strategy):\n    def next(self):\n        while True:\n            pass\n"
QUICK = "class Quick(bt.Strategy):\n    def next(self):\n        pass\n"


def descendants(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split() if int(p) != pid]


def main() -> None:
    import django

    django.setup()
    import redis

    from backtests.models import Report
    from billing.models import Code, Transfer
    from billing.selectors import credit_usage, ledger_drift
    from leroy.celery import app

    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "global_keyprefix": PREFIX}
    broker = redis.Redis.from_url(REDIS)
    user, strategies = backtest_world("crash@example.com", "CRASHUSD", {"spin": SPIN, "quick": QUICK})

    worker = start(WORKER)
    replacement = None
    orphans: list[int] = []
    try:
        running = backtest_submit(user, strategies["spin"])
        executing = wait_for(lambda: Report.objects.get(pk=running.pk).status == "EXECUTING", 60)
        queued = backtest_submit(user, strategies["quick"])
        # Both messages are delivered to the worker and unacknowledged (acks late): one running, one prefetched.
        prefetched = wait_for(lambda: broker.hlen(PREFIX + "unacked") == 2, 20)
        reserved = credit_usage(user=user)["credits_remaining"]
        orphans = descendants(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)  # the main process only
        worker.wait(timeout=10)
        queued_status_at_kill = Report.objects.get(pk=queued.pk).status
        replacement = start(WORKER)
        settled = wait_for(
            lambda: (
                set(Report.objects.filter(pk__in=[running.pk, queued.pk]).values_list("status", flat=True))
                <= {"FAILED", "COMPLETED"}
            ),
            45,
        )
        time.sleep(1.0)  # a duplicate delivery, if any, would land now
        first, second = Report.objects.get(pk=running.pk), Report.objects.get(pk=queued.pk)
        holds = {
            str(r.pk): sorted(Transfer.objects.filter(pending_id=r.hold_id).values_list("code", flat=True))
            for r in (first, second)
        }
        print(
            json.dumps(
                {
                    "executing_seen": executing,
                    "prefetched_two": prefetched,
                    "credits_while_reserved": reserved,
                    "queued_status_at_kill": queued_status_at_kill,
                    "settled": settled,
                    "running_status": first.status,
                    "running_error": (first.error or {}).get("code"),
                    "queued_status": second.status,
                    "running_hold": holds[str(first.pk)],
                    "queued_hold": holds[str(second.pk)],
                    "reserves": Transfer.objects.filter(code=Code.RESERVE).count(),
                    "credits_after": credit_usage(user=user)["credits_remaining"],
                    "unacked_after": broker.hlen(PREFIX + "unacked"),
                    "ledger_drift": len(ledger_drift()),
                }
            )
        )
    finally:
        stop(worker, replacement)
        for pid in orphans:  # pool and sandbox processes the killed main left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for key in broker.scan_iter(PREFIX + "*"):
            broker.delete(key)


if __name__ == "__main__":
    main()
