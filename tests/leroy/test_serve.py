"""`manage.py serve` (what `make demo` runs) takes its uvicorn, Celery worker and beat with it however it ends: on
SIGTERM and on SIGHUP (the terminal closed) it stops them, and killed outright they are tied to it."""

import sys

import pytest

from tests.processes import free_port, killed

# The worker's main and pool processes and beat: all three children have started.
CELERY_UP = ("-A leroy", 3)


@pytest.mark.parametrize(("signal_name", "code"), [("TERM", 0), ("HUP", 0), ("KILL", -9)])
def test_serve_leaves_no_process_and_no_temporary_file_however_it_is_stopped(tmp_path, signal_name, code):
    scratch = tmp_path / "tmp"
    scratch.mkdir()

    report = killed(
        *CELERY_UP,
        [sys.executable, "manage.py", "serve", "--port", str(free_port()), "--concurrency", "1"],
        signal_name=signal_name,
        DJANGO_SETTINGS_MODULE="leroy.settings",
        LEROY_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path}/serve.sqlite3",
        SECRET_KEY="serve-test-" + "x" * 40,
        TMPDIR=str(scratch),
    )

    assert report == {"seen": True, "code": code, "left": []}
    assert list(scratch.iterdir()) == []
