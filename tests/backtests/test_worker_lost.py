import json
import subprocess
import sys
from pathlib import Path


def test_a_worker_killed_mid_backtest_fails_the_report_and_voids_its_credits():
    script = Path(__file__).with_name("worker_lost.py")

    finished = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, check=False)

    assert finished.returncode == 0, finished.stderr[-2000:]
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    assert outcome == {
        "executing_seen": True,
        "credits_remaining_while_reserved": 985,  # a backtest and its look-ahead probe: 10 + 5
        "status": "FAILED",
        "error_code": "worker_lost",
        "credits_remaining_after": 1000,
        "sandbox_children": 1,
        "sandbox_children_gone": True,
    }
