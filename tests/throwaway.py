"""A throwaway Leroy for the fault scripts a test runs in a subprocess (tests/backtests/worker_crash.py,
worker_lost.py, tests/billing/beat_restart.py): production settings over SQLite in a fresh var dir, real Celery
processes started from source, and their cleanup. Import it before Django is set up."""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leroy import serving  # no Django setup: its settings are read lazily
from tests.migrated import copy_migrated

ROOT = Path(__file__).resolve().parents[1]

# Run in a child interpreter: production settings, the broker's transport options plus `options` (a dict literal).
CELERY = """
import os, time
import django
django.setup()
from django.conf import settings
from leroy.celery import app
app.conf.broker_transport_options = {{**settings.CELERY_BROKER_TRANSPORT_OPTIONS, **{options}}}
"""


def environment(name: str, **extra: str) -> Path:
    """Point this process (and what it starts) at a fresh var dir under production settings, removed when this
    process exits (after the scripts' `finally` has stopped their workers); return the dir."""
    var = Path(tempfile.mkdtemp(prefix=f"leroy-{name}-"))
    atexit.register(shutil.rmtree, var, ignore_errors=True)
    for key in [k for k in os.environ if k.startswith("LEROY_") or k in ("DATABASE_URL", "REDIS_URL")]:
        del os.environ[key]
    os.environ.update(DJANGO_SETTINGS_MODULE="leroy.settings", LEROY_VAR_DIR=str(var), SECRET_KEY=f"{name}-" + "x" * 40)
    os.environ.update(extra)
    return var


def celery(body: str, *, options: str = "{}") -> str:
    """The source of a child that boots Celery under this environment and then runs `body`."""
    return CELERY.format(options=options) + body


def start(code: str) -> subprocess.Popen[bytes]:
    """Run `code` in a new interpreter and process group (so a kill reaches its pool and sandboxes too)."""
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, env=os.environ.copy(), start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def stop(*processes: subprocess.Popen[bytes] | None) -> None:
    """Stop each process group (a warm shutdown, then SIGKILL for what is left after a minute: a worker whose
    redelivered task never ends must not outlive the script)."""
    for process in processes:
        if process is not None:
            serving.stop_group(process, grace=60)


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def migrate() -> None:
    """This process's SQLite database migrated: a copy of the test run's migrated template, when there is one."""
    from django.conf import settings
    from django.core.management import call_command

    copy_migrated(Path(settings.DATABASES["default"]["NAME"]))
    call_command("migrate", verbosity=0)


def backtest_world(email: str, ticker: str, strategies: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """Migrate, then one user, 60 daily bars of `ticker` and a dry-run-passed strategy per (name, code)."""
    import polars as pl

    from accounts.services import user_create
    from backtests import services
    from backtests.dryrun import walk
    from backtests.models import DryRunPass
    from evidence.marketdata.importers import bars_import
    from leroy.clock import now

    migrate()
    user = user_create(email=email, password="throwaway leroy password 1")
    bars = walk(ticker, bars=60)
    frame = pl.DataFrame(
        {
            "ts": pl.Series(bars["ts_us"], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
            **{k: bars[k] for k in ("open", "high", "low", "close", "volume")},
        }
    )
    bars_import(ticker=ticker, frequency="1d", frame=frame, asset_class="crypto")
    created = {}
    for name, code in strategies.items():
        DryRunPass.objects.create(user=user, code_sha256=services.code_sha256(code), created_at=now())
        created[name] = services.strategy_create(user=user, name=name, code=code)
    return user, created


def backtest_submit(user: Any, strategy: Any) -> Any:
    """A backtest of `strategy` over the world's one symbol, every bar, default simulation."""
    from datetime import date

    from backtests import services
    from evidence.models import Symbol

    return services.backtest_submit(
        user=user, strategy_id=str(strategy.pk), data_ids=[str(Symbol.objects.get().pk)], frequency="1d",
        start_date=date(2020, 1, 1), end_date=date(2030, 1, 1), parameters={},
        simulation={"initial_cash": 1000, "commission": 0, "leverage": 1, "buy_on_close": False},
    )  # fmt: skip
