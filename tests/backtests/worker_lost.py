"""A real Celery worker loses its pool process mid-backtest; prints what became of the report as JSON.

Run by test_worker_lost.py in a subprocess: it builds a throwaway Leroy (SQLite and kombu's filesystem broker
in a temporary var dir), starts a one-process worker, submits a never-ending backtest, SIGKILLs the pool
process while the report is EXECUTING, and waits for the broker's redelivery to settle the report.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VAR = tempfile.mkdtemp(prefix="leroy-worker-lost-")
for name in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
    del os.environ[name]
os.environ.update(DJANGO_SETTINGS_MODULE="leroy.settings", LEROY_VAR_DIR=VAR, SECRET_KEY="worker-lost-" + "x" * 40)
sys.path.insert(0, str(ROOT))

WORKER = """
import django
django.setup()
from django.conf import settings
from leroy.celery import app
app.conf.broker_transport_options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "polling_interval": 0.1}
app.worker_main(["worker", "--concurrency", "1", "-Q", "celery,backtests", "--loglevel", "WARNING",
                 "--without-heartbeat", "--without-gossip", "--without-mingle"])
"""
SPIN = "class Spin(bt.Strategy):\n    def next(self):\n        while True:\n            pass\n"


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def main() -> None:
    import django

    django.setup()
    import polars as pl
    from django.core.management import call_command

    from accounts.services import user_create
    from backtests import services
    from backtests.dryrun import walk
    from backtests.models import DryRunPass, Report
    from billing.selectors import credit_usage
    from evidence.marketdata.importers import bars_import
    from evidence.models import Symbol
    from leroy.clock import now

    call_command("migrate", verbosity=0)
    user = user_create(email="lost@example.com", password="worker lost password 1")
    bars = walk("LOSTUSD", bars=60)
    frame = pl.DataFrame(
        {
            "ts": pl.Series(bars["ts_us"], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
            **{k: bars[k] for k in ("open", "high", "low", "close", "volume")},
        }
    )
    bars_import(ticker="LOSTUSD", frequency="1d", frame=frame, asset_class="crypto")
    DryRunPass.objects.create(user=user, code_sha256=services.code_sha256(SPIN), created_at=now())
    strategy = services.strategy_create(user=user, name="spin", code=SPIN)
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER], cwd=ROOT, env=os.environ.copy(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        report = services.backtest_submit(
            user=user, strategy_id=str(strategy.pk), data_ids=[str(Symbol.objects.get().pk)], frequency="1d",
            start_date=date(2020, 1, 1), end_date=date(2030, 1, 1), parameters={},
            simulation={"initial_cash": 1000, "commission": 0, "leverage": 1, "buy_on_close": False},
        )  # fmt: skip
        reserved = credit_usage(user=user)["credits_remaining"]
        executing = wait_for(lambda: Report.objects.get(pk=report.pk).status == "EXECUTING", 60)
        time.sleep(1.0)  # the sandbox child is running the endless strategy
        pool = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True, check=False)
        pool_pid = int(pool.stdout.split()[0])
        sandbox = subprocess.run(["pgrep", "-P", str(pool_pid)], capture_output=True, text=True, check=False)
        os.kill(pool_pid, signal.SIGKILL)
        wait_for(lambda: Report.objects.get(pk=report.pk).status in ("FAILED", "COMPLETED"), 60)
        final = Report.objects.get(pk=report.pk)
        orphans_gone = wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in sandbox.stdout.split()), 10)
        print(
            json.dumps(
                {
                    "executing_seen": executing,
                    "credits_remaining_while_reserved": reserved,
                    "status": final.status,
                    "error_code": (final.error or {}).get("code"),
                    "credits_remaining_after": credit_usage(user=user)["credits_remaining"],
                    "sandbox_children": len(sandbox.stdout.split()),
                    "sandbox_children_gone": orphans_gone,
                }
            )
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)


if __name__ == "__main__":
    main()
