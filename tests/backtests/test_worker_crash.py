import json
import subprocess
import sys
from pathlib import Path

from django.conf import settings


def test_a_killed_worker_main_process_fails_the_running_job_and_runs_the_prefetched_one_once():
    script = Path(__file__).with_name("worker_crash.py")
    env = {"LEROY_TEST_REDIS_URL": settings.LEROY_TEST_REDIS_URL, "PATH": "/usr/bin:/bin"}

    finished = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, check=False, env=env
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    assert outcome == {
        "executing_seen": True,
        "prefetched_two": True,
        "credits_while_reserved": 970,  # two backtests, each 10 + 5 for its look-ahead probe
        "queued_status_at_kill": "PENDING",
        "settled": True,
        "running_status": "FAILED",
        "running_error": "worker_lost",
        "queued_status": "COMPLETED",
        "running_hold": ["void"],  # refunded, never run twice
        "queued_hold": ["post"],  # charged once
        "reserves": 2,
        "credits_after": 990,  # the queued one's 10: it took no order decisions, so its probe did not run
        "unacked_after": 0,
        "ledger_drift": 0,
    }
