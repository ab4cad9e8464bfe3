"""A served artifact that rots is withdrawn: scheduled re-verification, every evidence tool refuses, nothing charged."""

import shutil
from pathlib import Path

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import override_settings

from accounts import services as account_services
from billing.models import UsageEvent
from evidence import schemas, tasks
from evidence.live import frames
from evidence.memory import selectors
from evidence.memory.selectors import memory_reader
from evidence.models import MarketMemoryArtifact
from leroy.errors import DomainError
from tests.calls import call_tool

pytestmark = pytest.mark.django_db

CALLS = {
    "evaluate_current_setup": schemas.EvaluateArgs(symbol="ALFA", side="buy"),
    "get_current_confluence_leaders": schemas.LeadersArgs(side="buy"),
    "search_market_memory": schemas.SearchArgs(side="buy", horizon_minutes=15),
    "compare_historical_analogues": schemas.SetupArgs(symbol="ALFA", side="buy"),
    "get_market_regime": schemas.RegimeArgs(),
    "explain_setup_failure": schemas.SetupArgs(symbol="ALFA", side="buy"),
    "compare_against_benchmark": schemas.SetupArgs(symbol="ALFA", side="buy"),
    "simulate_exit_policy": schemas.ExitPolicyArgs(symbol="ALFA", side="buy", stop_bps=50, target_bps=50),
    "estimate_execution_conditions": schemas.ExecutionArgs(symbol="ALFA"),
    "get_data_lineage": schemas.LineageArgs(),
}


def test_a_flipped_byte_withdraws_the_artifact_from_every_tool_within_one_verification(world, tmp_path: Path, client):
    user = account_services.user_create(email="agent@example.com", password=None)
    data_dir = tmp_path / "copy"
    shutil.copytree(world.data_dir, data_dir)  # the world's files are shared by the session: corrupt a copy
    artifact = MarketMemoryArtifact.objects.get(is_active=True)
    with override_settings(LEROY_DATA_DIR=str(data_dir), LEROY_MM_RELOAD_SECONDS=0):
        selectors._reader_state.update(reader=None)  # open the copy, not the shared files
        memory_reader(refresh=True)
        with time_machine.travel(world.replay, tick=False):
            frames.replay_tick()
            frames.frames_refresh()
            assert call_tool(user, "evaluate_current_setup", CALLS["evaluate_current_setup"]).status == "evaluated"
            charged = UsageEvent.objects.count()
            call_command("market_memory_status")  # verifies: exit 0

            serving = data_dir / artifact.path / "serve.sqlite3"
            data = bytearray(serving.read_bytes())
            data[len(data) // 2] ^= 0x01
            serving.write_bytes(bytes(data))
            tasks.market_memory_verify_task()  # one scheduled verification

            for name, args in CALLS.items():
                with pytest.raises(DomainError) as refused:
                    call_tool(user, name, args)
                payload = refused.value.payload()["error"]
                assert payload["code"] == "evidence_unavailable", name
                assert payload["artifact_version"] == artifact.version
                assert "serve.sqlite3" in payload["reason"]
                assert set(payload) == {"code", "message", "reason", "artifact_version", "artifact_sha256"}
            with pytest.raises(CommandError, match="failed verification"):
                call_command("market_memory_status")
            ready = client.get("/readyz")
            assert ready.status_code == 503
            check = ready.json()["checks"]["market_memory"]
            assert (check["status"], check["code"], check["artifact_version"]) == (
                "fail", "evidence_unavailable", artifact.version
            )  # fmt: skip
            assert "serve.sqlite3" in check["reason"]

    assert UsageEvent.objects.count() == charged == 1  # only the evaluation before the corruption
    assert MarketMemoryArtifact.objects.filter(is_active=True).exists() is False


def test_status_command_exits_non_zero_on_a_mismatch(world, tmp_path: Path):
    data_dir = tmp_path / "copy"
    shutil.copytree(world.data_dir, data_dir)
    artifact = MarketMemoryArtifact.objects.get(is_active=True)
    manifest_listed = data_dir / artifact.path / "tier5.parquet"
    manifest_listed.write_bytes(manifest_listed.read_bytes() + b"\0")
    with override_settings(LEROY_DATA_DIR=str(data_dir)), pytest.raises(CommandError, match=r"tier5\.parquet"):
        call_command("market_memory_status")

    assert MarketMemoryArtifact.objects.filter(is_active=True).exists() is False
