"""MCP throughput: a no-op public tool vs a keyed subscriber tool and `evaluate_current_setup`, over 2026-07-28.

Starts uvicorn (2 workers) on PostgreSQL and Redis when they answer on 127.0.0.1 (else SQLite and per-worker
cache), drives N concurrent `tools/call` requests per tool and prints one line: requests/s and p50/p99 latency
for each tool and each one's throughput ratio to the no-op tool, the baseline measured in the same run.

For `evaluate_current_setup` it first loads a small synthetic universe, builds and activates Market Memory and runs
one replay tick of the frame feed on the replay clock the server also uses; the agent then repeats one request on
that frame, so after the first (charged) call the cached evaluation is served and metered at 0 lookups.

    .venv/bin/python bench/mcp_throughput.py [--requests 2000] [--concurrency 16] [--subscriber-tool get_usage]
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare_env(var_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEROY_", "DATABASE_URL", "REDIS_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="leroy.settings",
        LEROY_VAR_DIR=var_dir,
        MCP_CONFORMANCE_FIXTURES="1",  # test_simple_text is the no-op public tool
        LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE="100000000",
        LEROY_RATE_LIMIT_ANONYMOUS_PER_MINUTE="100000000",
        SECRET_KEY="bench-only-secret-key-" + "x" * 40,
    )
    if answers(5432):
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", "DROP DATABASE IF EXISTS leroy_bench"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", "CREATE DATABASE leroy_bench"],
            check=True,
            capture_output=True,
        )
        env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/leroy_bench"
    if answers(6379):
        env["REDIS_URL"] = "redis://127.0.0.1:6379/14"
    return env


def manage(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()


def prepare_evidence(env: dict[str, str]) -> None:
    """A 2-symbol demo universe with an active artifact and current frames; pins the replay clock into `env`."""
    env["LEROY_MM_MIN_SESSIONS"] = "3"  # a 75-session universe cannot reach the production minimum of 30
    clock = manage(env, "load_demo_data", "--symbols", "2", "--sessions", "75", "--overlay-sessions", "2")[-1]
    env["LEROY_CLOCK"] = clock.removeprefix("LEROY_CLOCK=")
    env["LEROY_FRAME_FEED"] = "replay"
    manage(env, "build_market_memory")
    manage(env, "feed_frames")


def call_body(name: str, arguments: dict, request_id: int) -> dict:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta},
    }


async def drive(
    url: str, name: str, arguments: dict, key: str | None, total: int, concurrency: int, expect: str = ""
) -> tuple:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    if key:
        headers["Authorization"] = f"Bearer {key}"
    latencies: list[float] = []
    counter = iter(range(total))
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(headers=headers, limits=limits, timeout=30) as client:

        async def worker() -> None:
            for request_id in counter:
                started = time.perf_counter()
                response = await client.post(url, json=call_body(name, arguments, request_id))
                if response.status_code != 200 or '"isError":true' in response.text or expect not in response.text:
                    raise SystemExit(f"{name} failed: {response.status_code} {response.text[:300]}")
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return total / elapsed, statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--subscriber-tool", default="get_usage")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as var_dir:
        env = prepare_env(var_dir)
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        issued = subprocess.run(
            [PY, "manage.py", "issue_api_key", "bench@leroy.local", "--create-user"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        key = issued.stdout.strip().splitlines()[-1]
        prepare_evidence(env)
        port = free_port()
        server = subprocess.Popen(
            [
                str(Path(PY).parent / "uvicorn"),
                "leroy.asgi:application",
                "--port",
                str(port),
                "--workers",
                "2",
                "--lifespan",
                "on",
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
        )
        try:
            url = f"http://127.0.0.1:{port}/api/mcp"
            for _ in range(600):  # uvicorn workers import Django and build the MCP server before listening
                try:
                    if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                time.sleep(0.1)
            asyncio.run(drive(url, "test_simple_text", {}, None, 50, 4))  # warm both workers
            public = asyncio.run(drive(url, "test_simple_text", {}, None, args.requests, args.concurrency))
            keyed = asyncio.run(drive(url, args.subscriber_tool, {}, key, args.requests, args.concurrency))
            setup = {"symbol": "ALFA", "side": "buy"}
            evaluated = '"status":"evaluated"'  # a real evaluation, not an unavailable frame
            evaluate = asyncio.run(
                drive(url, "evaluate_current_setup", setup, key, args.requests, args.concurrency, evaluated)
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    database = "postgresql" if "DATABASE_URL" in env else "sqlite"
    print(
        f"mcp_throughput db={database} n={args.requests} c={args.concurrency} "
        f"noop_public: {public[0]:.0f} req/s p50={public[1]:.1f}ms p99={public[2]:.1f}ms | "
        f"{args.subscriber_tool}_keyed: {keyed[0]:.0f} req/s p50={keyed[1]:.1f}ms p99={keyed[2]:.1f}ms | "
        f"evaluate_current_setup_keyed: {evaluate[0]:.0f} req/s p50={evaluate[1]:.1f}ms p99={evaluate[2]:.1f}ms | "
        f"keyed/noop throughput ratio={keyed[0] / public[0]:.2f} evaluate/noop={evaluate[0] / public[0]:.2f}"
    )


if __name__ == "__main__":
    main()
