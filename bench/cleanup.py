"""What every bench calls first so that no exit leaves anything behind.

A bench stops its servers and workers in `finally` blocks and drops its databases and directories in `atexit`
hooks. Ctrl-C runs both; SIGTERM (a timeout's kill, `kill`) and SIGHUP (a closed terminal) would end the process
without either, so they are turned into an ordinary exit. The first signal starts the cleanup and later ones are
ignored, so a second kill cannot cut a running cleanup short.
"""

import atexit
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


def _exit(signum: int, _frame: FrameType | None) -> None:
    for each in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(each, signal.SIG_IGN)
    sys.exit(128 + signum)


def exit_on_signals() -> None:
    for each in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, _exit)


def scratch_directory(prefix: str) -> str:
    """A new temporary directory, removed when the bench exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@contextmanager
def throwaway_database() -> Iterator[None]:
    """Run on a new, migrated `test_<name>` database of the configured one, dropped on leaving (Django set up)."""
    from django.db import connection, connections

    creation = connection.creation
    creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        connections.close_all()
        creation.destroy_test_db(connection.settings_dict["NAME"].removeprefix("test_"), verbosity=0)
