"""A small synthetic world with an active Market Memory artifact, built once per test session.

The build runs in a subprocess against its own SQLite database; each test loads the resulting rows into its own test
database and points LEROY_DATA_DIR at the shared (read-only) bar store and artifact. Import the fixtures you use.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command
from django.test import override_settings

from evidence.live import frames
from evidence.memory import selectors
from evidence.memory.selectors import memory_reader
from tests.migrated import copy_migrated

ROOT = Path(__file__).resolve().parents[2]
MIN_SESSIONS = 3


@dataclass(frozen=True)
class World:
    data_dir: Path
    fixture: Path
    replay: datetime  # a minute inside the open, provisional replay session
    sha256: str


@pytest.fixture(scope="session")
def world_files(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("world")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="leroy.settings",
        LEROY_VAR_DIR=str(root / "var"),
        DATABASE_URL=f"sqlite:///{root / 'world.sqlite3'}",
        LEROY_MM_MIN_SESSIONS=str(MIN_SESSIONS),
        SECRET_KEY="world-builder-" + "k" * 50,
        # Its log's checkpoints verify with the tests' key, under the origin that key is named for.
        LEROY_LOG_SIGNING_KEY=os.environ["LEROY_LOG_SIGNING_KEY"],
        LEROY_LOG_ORIGIN=os.environ["LEROY_LOG_ORIGIN"],
    )

    def manage(*args: str, **extra: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env={**env, **extra}, check=True, capture_output=True,
            text=True,
        )  # fmt: skip
        return done.stdout.strip().splitlines()

    copy_migrated(root / "world.sqlite3")
    manage("migrate", "-v0")
    clock = manage("load_demo_data", "--symbols", "2", "--sessions", "75", "--overlay-sessions", "2", "--seed", "11")[
        -1
    ]
    replay = clock.removeprefix("LEROY_CLOCK=")
    built = manage("build_market_memory", LEROY_CLOCK=replay)
    fixture = root / "world.json"
    manage("dumpdata", "evidence", "--output", str(fixture))
    sha = next(line for line in built if line.startswith("{"))
    return World(
        data_dir=root / "var" / "data",
        fixture=fixture,
        replay=datetime.fromisoformat(replay.removeprefix("replay:").replace("Z", "+00:00")),
        sha256=sha.split('"sha256": "')[1].split('"')[0],
    )


@pytest.fixture
def world(world_files: World) -> Iterator[World]:
    """The world's rows in this test's database (needs a django_db mark), its files as the data dir."""
    with override_settings(LEROY_DATA_DIR=str(world_files.data_dir)):
        call_command("loaddata", str(world_files.fixture), verbosity=0)
        memory_reader(refresh=True)
        yield world_files
    # Forget this artifact so later tests with other data directories open their own.
    selectors._reader_state.update(reader=None, checked=float("-inf"))


@pytest.fixture
def fed_world(world: World) -> Iterator[World]:
    """The world with the replay driver run up to its replay minute and the frames computed (clock frozen there)."""
    with time_machine.travel(world.replay, tick=False):
        frames.replay_tick()
        frames.frames_refresh()
        yield world
