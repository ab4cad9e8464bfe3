"""The runtime directory belongs to the server user alone; the ground floor: imports no app.

The sandboxed strategy child runs under its own uid: whatever the layers in force, it must be able to read
nothing the server keeps (the SQLite database and its WAL, `secret_key`, the bars). So this process creates
files 0600 and directories 0700 (umask 077), and tightens what already exists.
"""

import os
from pathlib import Path

PRIVATE_UMASK = 0o077
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int) -> None:
    if path.exists() and path.stat().st_uid == os.geteuid():
        path.chmod(mode)


def keep_private(var_dir: Path, *, data_dir: str = "", sqlite_file: str = "") -> None:
    """Make the runtime directory (and a local data dir or SQLite file outside it) private to this user."""
    os.umask(PRIVATE_UMASK)
    directories = [var_dir] + ([Path(data_dir)] if data_dir and "://" not in data_dir else [])
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        _tighten(directory, 0o700)
    _tighten(var_dir / "secret_key", 0o600)
    if sqlite_file and sqlite_file != ":memory:":
        for suffix in SQLITE_SUFFIXES:
            _tighten(Path(sqlite_file + suffix), 0o600)
