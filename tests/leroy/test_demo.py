import base64
import json
import os
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from pathlib import Path

import httpx2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.cache import cache
from django.core.management import call_command
from django.test import override_settings

from accounts import services
from accounts.models import ApiKey, User
from backtests.schemas import RunOptimizationArgs, RunWalkForwardArgs
from billing.models import UsageEvent
from billing.services import BillingError
from evidence.models import AnswerReceipt, Frame
from evidence.publication.signing import Signer, format_private_key, parse_private_key
from evidence.schemas import EvaluateArgs
from leroy.clock import anchored
from leroy.management.commands.demo import (
    DEMO_EMAIL,
    Command,
    demo_optimizations,
    issue_demo_credentials,
)
from leroy.mcp.registry import call_for
from tests.migrated import copy_migrated
from tests.processes import ROOT, free_port


def test_demo_prints_a_working_write_key_and_revokes_the_previous_one(db):
    outputs = []
    for _ in range(2):
        out = StringIO()
        call_command("demo", "--no-serve", "--no-data", stdout=out)
        outputs.append(out.getvalue())

    keys = [
        line.split("=", 1)[1]
        for text in outputs
        for line in text.splitlines()
        if line.startswith("LEROY_DEMO_API_KEY=")
    ]
    user = User.objects.get(email="demo@leroy.local")
    assert len(keys) == 2
    assert services.api_key_authenticate(plaintext=keys[0]) is None
    assert services.api_key_authenticate(plaintext=keys[1]).scope_list == ["mcp:read", "mcp:write"]
    assert ApiKey.objects.filter(user=user, revoked_at__isnull=True).count() == 1
    assert '"url": "http://127.0.0.1:8000/api/mcp"' in outputs[1]
    assert f'"Authorization": "Bearer {keys[1]}"' in outputs[1]


def test_demo_prints_the_landing_page_url(db):
    out = StringIO()

    call_command("demo", "--no-serve", "--no-data", "--port", "8123", stdout=out)

    assert "Leroy: http://127.0.0.1:8123/\n" in out.getvalue()


def demo_database(tmp_path) -> Path:
    database = tmp_path / "demo.sqlite3"
    if not database.exists():
        copy_migrated(database)
    return database


def run_demo(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py demo --no-serve --no-data` from the command line, under production settings, on its own database."""
    database = demo_database(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL", "PORT"))}
    base.update(DJANGO_SETTINGS_MODULE="leroy.settings", LEROY_VAR_DIR=str(tmp_path / "var"),
                DATABASE_URL=f"sqlite:///{database}", SECRET_KEY="demo-origin-" + "x" * 40)  # fmt: skip
    command = [sys.executable, "manage.py", "demo", "--no-serve", "--no-data"]
    return subprocess.run(command, cwd=ROOT, env=base | env, capture_output=True, text=True, timeout=180)


def test_the_demo_names_the_log_for_the_port_it_serves_unless_an_origin_is_set(tmp_path):
    # Settings name the log's origin as they load, before the command runs: `make demo` with PORT=8811 signed its
    # first checkpoints as 127.0.0.1:8000/log and the served processes' later ones as 127.0.0.1:8811/log.
    served = run_demo(tmp_path, PORT="8811").stdout
    configured = run_demo(tmp_path, PORT="8811", LEROY_PUBLIC_ORIGIN="https://demo.example").stdout

    named = "Publication log origin (its key and checkpoints are named for it): "
    assert f"Leroy: http://127.0.0.1:8811/\n{named}127.0.0.1:8811/log\n" in served
    assert f"Leroy: http://127.0.0.1:8811/\n{named}demo.example/log\n" in configured


def var_dir_first_served_on_8000(tmp_path) -> Signer:
    (tmp_path / "var").mkdir()
    key = format_private_key("127.0.0.1:8000/log", Ed25519PrivateKey.generate())
    (tmp_path / "var" / "log_signing_key").write_text(key + "\n")
    return parse_private_key(key)


def test_the_demo_on_a_var_dir_first_served_on_another_port_keeps_its_logs_origin(tmp_path):
    # The var dir's key was generated when the demo first served port 8000; served on 8766 the demo named the log
    # 127.0.0.1:8766/log and signed it with that key, mixing two origins in one log.
    var_dir_first_served_on_8000(tmp_path)

    done = run_demo(tmp_path, PORT="8766")

    named = "Publication log origin (its key and checkpoints are named for it): "
    assert done.returncode == 0, done.stderr
    assert (
        f"Leroy: http://127.0.0.1:8766/\n{named}127.0.0.1:8000/log\n  (not the served host's: a log keeps the origin "
        "it was started under; for a log named for 127.0.0.1:8766, start from a fresh LEROY_VAR_DIR)\n"
    ) in done.stdout


def test_the_demo_refuses_to_start_on_a_log_already_signed_under_two_origins(tmp_path):
    # What such a run left: the key named for port 8000, the latest checkpoint named for port 8766.
    key = var_dir_first_served_on_8000(tmp_path)
    note = key.sign(f"127.0.0.1:8766/log\n1\n{base64.b64encode(bytes(32)).decode()}\n")
    with sqlite3.connect(demo_database(tmp_path)) as database:
        database.execute(
            "INSERT INTO evidence_logcheckpoint (tree_size, root_hash, frontier, note, created_at) "
            "VALUES (1, ?, '[]', ?, '2026-12-01 00:00:00')",
            ["00" * 32, note],
        )

    done = run_demo(tmp_path, PORT="8766")

    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "CommandError: publication log: the log in this database is 127.0.0.1:8766/log (its latest checkpoint's "
        "origin), not this server's log origin 127.0.0.1:8000/log; nothing is appended. Set "
        "LEROY_LOG_ORIGIN=127.0.0.1:8766/log with the key that signed it, or start a new log with a fresh database "
        "(make demo: a fresh LEROY_VAR_DIR)."
    )
    assert "LEROY_DEMO_API_KEY" not in done.stdout


def test_the_printed_demo_optimizations_are_valid_tool_arguments():
    optimization, walk_forward = demo_optimizations("s-1", "2", date(2017, 1, 3), date(2026, 5, 19))

    assert RunOptimizationArgs.from_arguments(optimization).target_metric == "annualized_sharpe_ratio"
    parsed = RunWalkForwardArgs.from_arguments(walk_forward)
    assert (parsed.train_period.months, parsed.test_period.months, parsed.anchored) == (24, 12, False)


@pytest.mark.django_db(transaction=True)
def test_a_later_demo_run_reuses_its_answer_and_an_allowance_used_up_does_not_stop_it(fed_world, tmp_path):
    # The replay clock repeats the same month on every run: each run once spent a lookup, and a run after an agent
    # had used the demo account's lookups up stopped `make demo` with the quota refusal.
    issue_demo_credentials()
    user = User.objects.get(email=DEMO_EMAIL)
    clock = anchored(f"replay:{fed_world.replay.isoformat()}", datetime.now(UTC))
    saved = tmp_path / "demo" / "answer.json"

    def publish() -> str:
        out = StringIO()
        with override_settings(LEROY_CLOCK=clock):
            Command(stdout=out).publish_demo_answer(origin="http://127.0.0.1:8000")
        return out.getvalue()

    with override_settings(LEROY_VAR_DIR=str(tmp_path)):
        first, second = publish(), publish()
        answer_id = json.loads(saved.read_text())["evaluation_id"]
        charged = UsageEvent.objects.filter(user=user).count()
        symbol = Frame.objects.filter(ready=True).order_by("symbol__ticker").values_list("symbol__ticker", flat=True)[0]
        with pytest.raises(BillingError):  # an agent's distinct evaluations until the allowance is gone
            for cents in range(1, 10_000):
                call_for(
                    user_id=user.pk,
                    tool="evaluate_current_setup",
                    args=EvaluateArgs(symbol=symbol, side="buy", entry_price=cents / 100),
                )
        saved.unlink()
        cache.clear()  # a new run's process: the first run's answer is no longer cached for free
        events = UsageEvent.objects.filter(user=user).count()
        receipts = AnswerReceipt.objects.filter(user=user).count()
        third = publish()

    assert charged == 1
    assert f"--answer {saved}" in first and f"--answer {saved}" in second
    assert AnswerReceipt.objects.filter(user=user, answer_id=answer_id, log_index__isnull=False).exists()
    assert "No demo answer to verify this time: The Free plan's included lookups" in third
    assert "--answer" not in third
    assert UsageEvent.objects.filter(user=user).count() == events
    assert AnswerReceipt.objects.filter(user=user).count() == receipts


@pytest.mark.django_db
def test_the_demo_key_is_created_on_the_clock_the_served_processes_start_on():
    # The key was created on the real clock and used by servers on the replay clock: "last used" before "created".
    replay = datetime(2026, 5, 19, 14, 30, tzinfo=UTC)

    with override_settings(LEROY_CLOCK=anchored(f"replay:{replay.isoformat()}", datetime.now(UTC))):
        issue_demo_credentials()

    created = ApiKey.objects.get(user__email=DEMO_EMAIL, revoked_at__isnull=True).created_at
    assert replay <= created < replay + timedelta(minutes=1)


def test_the_demo_prints_its_ready_line_once_the_landing_page_answers(tmp_path):
    # No line said the demo was ready; the one that said "ready" ("Market Memory ready") came before the servers
    # were up.
    database = tmp_path / "demo.sqlite3"
    copy_migrated(database)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL", "PORT"))}
    env |= {"DJANGO_SETTINGS_MODULE": "leroy.settings", "LEROY_VAR_DIR": str(tmp_path / "var"),
            "DATABASE_URL": f"sqlite:///{database}", "SECRET_KEY": "demo-ready-" + "x" * 40}  # fmt: skip
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--no-data", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        printed = []
        for line in demo.stdout:
            printed.append(line)
            if line.startswith("Leroy ready"):
                landing = httpx2.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=60)

    ready = printed[-1]
    key = next(line for line in printed if line.startswith("LEROY_DEMO_API_KEY=")).strip().split("=", 1)[1]
    assert landing.status_code == 200
    assert ready.startswith(f"Leroy ready: http://127.0.0.1:{port}/ · log in as {DEMO_EMAIL} / ")
    assert f"LEROY_DEMO_API_KEY={key} · MCP client config: " in ready
    config = json.loads(ready.split("MCP client config: ", 1)[1])
    assert config["mcpServers"]["leroy"]["url"] == f"http://127.0.0.1:{port}/api/mcp"
    assert config["mcpServers"]["leroy"]["headers"] == {"Authorization": f"Bearer {key}"}
