"""One migrated SQLite database per test run, copied by the throwaway Leroys of the fault scripts and the evidence
world instead of migrating each their own (applying every migration takes ~10 s, mostly Django re-rendering the
model states of the later migrations). Imports no Django: it runs before a script's setup.

tests/conftest.py names the template's path in this run's temporary directory (`TEMPLATE_ENV`, not a LEROY_
variable: the throwaway environments drop those); the first caller migrates it, in a child interpreter under plain
settings, under a file lock. A script run by hand, without the variable, migrates its database itself.
"""

import fcntl
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_ENV = "TEST_MIGRATED_SQLITE"


def _template() -> Path | None:
    named = os.environ.get(TEMPLATE_ENV)
    if not named:
        return None
    template = Path(named)
    with open(template.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            with tempfile.TemporaryDirectory(dir=template.parent) as var:
                fresh = Path(var) / "migrated.sqlite3"
                env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
                env.update(DJANGO_SETTINGS_MODULE="leroy.settings", LEROY_VAR_DIR=var, DATABASE_URL=f"sqlite:///{fresh}",
                           SECRET_KEY="migrated-template-" + "k" * 40)  # fmt: skip
                subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
                fresh.rename(template)
    return template


def copy_migrated(database: Path) -> None:
    """Fill the not yet opened SQLite file `database` with this run's migrated template, when there is one (the
    caller's `migrate` then only runs the post-migrate hooks; without one it applies every migration)."""
    template = _template()
    if template is None:
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    source, target = sqlite3.connect(template), sqlite3.connect(database)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
