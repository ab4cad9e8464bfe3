import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings


def test_a_restarted_beat_closes_each_period_and_reports_each_overage_once():
    script = Path(__file__).with_name("beat_restart.py")
    env = {**os.environ, "LEROY_TEST_REDIS_URL": settings.LEROY_TEST_REDIS_URL}

    finished = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, check=False, env=env
    )

    assert finished.returncode == 0, finished.stderr[-2000:]
    assert json.loads(finished.stdout.strip().splitlines()[-1]) == {
        "first_done": True,
        "ran_again_after_restart": True,
        "expiries": 1,
        "closed_at_unchanged": True,
        "reports": [["sent", 1], ["sent", 1]],
        "ledger_drift": 0,
    }
