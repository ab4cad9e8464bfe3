"""What every bench calls first so that no exit leaves anything behind.

A bench stops its servers and workers in `finally` blocks and drops its databases and directories in `atexit`
hooks. Ctrl-C runs both; SIGTERM (a timeout's kill, `kill`) and SIGHUP (a closed terminal) would end the process
without either, so they are turned into an ordinary exit. The first signal starts the cleanup and later ones are
ignored, so a second kill cannot cut a running cleanup short. A signal's handler runs wherever the main thread is,
and where that is a weakref callback or a `__del__`, Python prints the exit it raises and goes on: the bench would
run to its end as if never signalled. Such an exit is sent again, to be raised at the next ordinary frame.
"""

import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any


class _SignalExit(SystemExit):
    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _exit(signum: int, _frame: FrameType | None) -> None:
    for each in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(each, signal.SIG_IGN)
    raise _SignalExit(signum)


def _unraisable(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, _SignalExit):  # ignored where it was raised: raise it again elsewhere
        signum = unraisable.exc_value.signum
        signal.signal(signum, _exit)
        # Later and from another thread: sent now, the handler would run inside this hook, whose exceptions are
        # dropped too. Should it land in such a place again, it comes back here again.
        resend = threading.Timer(0.05, os.kill, (os.getpid(), signum))
        resend.daemon = True
        resend.start()
        return
    sys.__unraisablehook__(unraisable)


TREE = Path(__file__).resolve().parents[1]  # the checkout this bench belongs to
PROJECT_PACKAGES = tomllib.loads((TREE / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


def check_tree() -> None:
    """Exit unless every project package this process has imported comes from this bench's own checkout. Celery's
    loader imports with the working directory first on `sys.path`, so a bench started from another checkout's
    directory would time that checkout's code under this one's name."""
    for name in PROJECT_PACKAGES:
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None)
        if origin is not None and Path(origin).resolve().parents[1] != TREE:
            sys.exit(
                f"{Path(sys.argv[0]).name}: {name} was imported from {Path(origin).parent}, not from {TREE}; "
                f"run the bench from {TREE}"
            )


def exit_on_signals() -> None:
    for each in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, _exit)
    sys.unraisablehook = _unraisable


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
