"""A real Celery worker's *main* process is SIGKILLed while one backtest runs and another sits prefetched;
prints what became of both reports as JSON.

Run by test_worker_crash.py in a subprocess: a throwaway Leroy (SQLite in a temporary var dir) on the real Redis
broker (LEROY_TEST_REDIS_URL, under a fresh key prefix), production settings, a one-process worker prefetching two
messages. After the kill a new worker starts; the broker returns both unacknowledged messages once the visibility
timeout (2 s here, 15 min in production) has passed: the one that was running fails as worker_lost and is refunded
(never run twice), the prefetched one runs once.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VAR = tempfile.mkdtemp(prefix="leroy-worker-crash-")
REDIS = os.environ["LEROY_TEST_REDIS_URL"]
PREFIX = f"leroy-crash-{uuid.uuid4().hex}:"
for name in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
    del os.environ[name]
os.environ.update(
    DJANGO_SETTINGS_MODULE="leroy.settings",
    LEROY_VAR_DIR=VAR,
    SECRET_KEY="worker-crash-" + "x" * 40,
    REDIS_URL=REDIS,
    LEROY_BROKER_VISIBILITY_TIMEOUT="2",
    LEROY_TEST_KEY_PREFIX=PREFIX,
)
sys.path.insert(0, str(ROOT))

WORKER = """
import os
import django
django.setup()
from django.conf import settings
from leroy.celery import app
app.conf.broker_transport_options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS,
                                     "global_keyprefix": os.environ["LEROY_TEST_KEY_PREFIX"]}
app.worker_main(["worker", "--concurrency", "1", "--prefetch-multiplier", "2", "-Q", "backtests",
                 "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle"])
"""
SPIN = "class Spin(bt.Strategy):\n    def next(self):\n        while True:\n            pass\n"
QUICK = "class Quick(bt.Strategy):\n    def next(self):\n        pass\n"


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def start_worker() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER], cwd=ROOT, env=os.environ.copy(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def descendants(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in found.stdout.split() if int(p) != pid]


def main() -> None:
    import django

    django.setup()
    import polars as pl
    import redis
    from django.core.management import call_command

    from accounts.services import user_create
    from backtests import services
    from backtests.dryrun import walk
    from backtests.models import DryRunPass, Report
    from billing.models import Code, Transfer
    from billing.selectors import credit_usage, ledger_drift
    from evidence.marketdata.importers import bars_import
    from evidence.models import Symbol
    from leroy.celery import app
    from leroy.clock import now

    app.conf.broker_transport_options = {**app.conf.broker_transport_options, "global_keyprefix": PREFIX}
    broker = redis.Redis.from_url(REDIS)
    call_command("migrate", verbosity=0)
    user = user_create(email="crash@example.com", password="worker crash password 1")
    bars = walk("CRASHUSD", bars=60)
    frame = pl.DataFrame(
        {
            "ts": pl.Series(bars["ts_us"], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
            **{k: bars[k] for k in ("open", "high", "low", "close", "volume")},
        }
    )
    bars_import(ticker="CRASHUSD", frequency="1d", frame=frame, asset_class="crypto")
    strategies = {}
    for name, code in (("spin", SPIN), ("quick", QUICK)):
        DryRunPass.objects.create(user=user, code_sha256=services.code_sha256(code), created_at=now())
        strategies[name] = services.strategy_create(user=user, name=name, code=code)

    def submit(name: str) -> Report:
        return services.backtest_submit(
            user=user, strategy_id=str(strategies[name].pk), data_ids=[str(Symbol.objects.get().pk)],
            frequency="1d", start_date=date(2020, 1, 1), end_date=date(2030, 1, 1), parameters={},
            simulation={"initial_cash": 1000, "commission": 0, "leverage": 1, "buy_on_close": False},
        )  # fmt: skip

    worker = start_worker()
    replacement = None
    orphans: list[int] = []
    try:
        running = submit("spin")
        executing = wait_for(lambda: Report.objects.get(pk=running.pk).status == "EXECUTING", 60)
        queued = submit("quick")
        # Both messages are delivered to the worker and unacknowledged (acks late): one running, one prefetched.
        prefetched = wait_for(lambda: broker.hlen(PREFIX + "unacked") == 2, 20)
        reserved = credit_usage(user=user)["credits_remaining"]
        orphans = descendants(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)  # the main process only
        worker.wait(timeout=10)
        queued_status_at_kill = Report.objects.get(pk=queued.pk).status
        replacement = start_worker()
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
        for process in (worker, replacement):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=60)
        for pid in orphans:  # pool and sandbox processes the killed main left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for key in broker.scan_iter(PREFIX + "*"):
            broker.delete(key)


if __name__ == "__main__":
    main()
