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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.throwaway import backtest_submit, backtest_world, celery, environment, start, stop, wait_for

environment("worker-lost")
WORKER = celery(
    """
app.worker_main(["worker", "--concurrency", "1", "-Q", "celery,backtests", "--loglevel", "WARNING",
                 "--without-heartbeat", "--without-gossip", "--without-mingle"])
""",
    options=repr({"polling_interval": 0.1}),
)
SPIN = "class Spin(bt.Strategy):\n    def next(self):\n        while True:\n            pass\n"


def main() -> None:
    import django

    django.setup()
    from backtests.models import Report
    from billing.selectors import credit_usage

    user, strategies = backtest_world("lost@example.com", "LOSTUSD", {"spin": SPIN})
    worker = start(WORKER)
    try:
        report = backtest_submit(user, strategies["spin"])
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
        stop(worker)


if __name__ == "__main__":
    main()
