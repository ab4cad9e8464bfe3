"""MCP throughput: a no-op public tool vs a keyed subscriber tool and `evaluate_current_setup`, over 2026-07-28.

Starts two uvicorn web processes (one worker each) on PostgreSQL and Redis when they answer on 127.0.0.1 (else
SQLite and per-process cache), drives N concurrent `tools/call` requests per tool, its connections split evenly
between the two (as a load balancer in front of two web processes would), and prints one line: requests/s and
p50/p99 latency for each tool and each one's throughput ratio to the no-op tool, the baseline measured in the same
run.

For `evaluate_current_setup` it first loads a small synthetic universe, builds and activates Market Memory and runs
one replay tick of the frame feed on the replay clock the server also uses. The timed evaluations are all distinct
(symbol, side, horizons and entry/stop/target prices vary across the universe), so none can be a cache hit; the
account's plan allows every lookup. Cache hits are timed apart (one request repeated) and every answer's
`usage.cache` is counted, so a hit can never pass for an evaluation. Each server runs in its own process group and
is killed, with the bench database dropped, on any exit (including Ctrl-C and SIGTERM).

Each phase also prints the cores each web process used during it (`workers=` CPU seconds over the phase's wall
time, from /proc). Not one uvicorn with `--workers 2`: its workers share one listening socket and the first to wake
accepts a whole burst of connections, so a phase's 8 keep-alive connections often all went to one worker
(`workers=0.94+0.00`) and the figure followed which worker(s) had accepted them (54-67 req/s on one, 78-81 on two,
same code) rather than the code.

    .venv/bin/python bench/mcp_throughput.py [--requests 2000] [--concurrency 16] [--symbols 5]
"""

import argparse
import asyncio
import atexit
import contextlib
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from cleanup import exit_on_signals  # bench/ is the script's directory
from procfs import processes  # bench/ is the script's directory

from leroy import serving

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
DATABASE = f"leroy_bench_mcp_{os.getpid()}"


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
        LEROY_ADMISSION_PER_PRINCIPAL="16",  # one bench account drives every request: throughput, not fairness
        SECRET_KEY="bench-only-secret-key-" + "x" * 40,
    )
    if answers(5432):
        psql(f"CREATE DATABASE {DATABASE}")
        atexit.register(psql, f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
    if answers(6379):
        # Its own Redis database (LEROY_TEST_REDIS_URL when set), emptied first: no earlier run's cached answers.
        env["REDIS_URL"] = os.environ.get("LEROY_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")
        subprocess.run([PY, "-c", f"import redis; redis.Redis.from_url({env['REDIS_URL']!r}).flushdb()"], check=True)
    return env


def workers_cpu(servers: list[int]) -> dict[int, float]:
    """CPU seconds so far of each web process (each serves in its own process: one worker, no spawned children)."""
    table = processes()
    return {pid: table[pid].cpu_s for pid in servers if pid in table}


def phase(servers: list[int], work) -> tuple:  # type: ignore[no-untyped-def]
    """`drive`'s figures and the cores each web process used meanwhile, busiest first (e.g. "0.97+0.92")."""
    before, started = workers_cpu(servers), time.perf_counter()
    figures = asyncio.run(work)
    elapsed, after = time.perf_counter() - started, workers_cpu(servers)
    cores = sorted(((used - before.get(pid, 0.0)) / elapsed for pid, used in after.items()), reverse=True)
    return *figures, "+".join(f"{core:.2f}" for core in cores)


def psql(sql: str) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", sql], check=True, capture_output=True)


def manage(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip().splitlines()


def prepare_evidence(env: dict[str, str], symbols: int) -> list[str]:
    """A demo universe with an active artifact and current frames; pins the replay clock into `env`; returns the
    tickers."""
    env["LEROY_MM_MIN_SESSIONS"] = "3"  # a 75-session universe cannot reach the production minimum of 30
    loaded = manage(env, "load_demo_data", "--symbols", str(symbols), "--sessions", "75", "--overlay-sessions", "2")
    clock = loaded[-1]
    env["LEROY_CLOCK"] = clock.removeprefix("LEROY_CLOCK=")
    env["LEROY_FRAME_FEED"] = "replay"
    manage(env, "build_market_memory")
    manage(env, "feed_frames")
    return [t for t in json.loads(loaded[-2])["tickers"] if t != "SYNX"]


def distinct_setups(tickers: list[str], total: int) -> list[dict]:
    """`total` different evaluation requests: every symbol, side and horizon set, and a distinct entry price each
    (with a stop and target on the side's correct sides), so no two share a cache key."""
    horizons = [list(c) for n in (1, 2, 4) for c in itertools.combinations((5, 15, 30, 60), n)]
    combos = itertools.cycle(itertools.product(tickers, ("buy", "sell", "both"), horizons))
    setups = []
    for i in range(total):
        symbol, side, chosen = next(combos)
        entry = round(50 + i * 0.01, 2)
        setup = {"symbol": symbol, "side": side, "holding_horizons": chosen, "entry_price": entry}
        if side != "both":
            sign = 1 if side == "buy" else -1
            setup |= {"stop_price": round(entry - sign * 1.5, 2), "target_price": round(entry + sign * 3.0, 2)}
        setups.append(setup)
    assert len({repr(s) for s in setups}) == total
    return setups


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


# An evaluation without a usable frame answers without Market Memory and charges nothing: a far cheaper path, which
# must never pass for an evaluation (the answer's JSON, raw in structuredContent and escaped in its text).
UNCONSULTED = ('"market_memory":null', '\\"market_memory\\":null')


async def drive(
    urls: list[str],
    name: str,
    arguments: dict | list[dict],
    key: str | None,
    total: int,
    concurrency: int,
    expect: str = "",
) -> tuple:
    """Requests/s, p50 and p99 ms, and how many answers said `"cache":"hit"`; `arguments` is one request repeated,
    or one per request. The `concurrency` callers are dealt to the `urls` in turn, each keeping one connection."""
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
    hits = 0
    counter = iter(range(total))
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(headers=headers, limits=limits, timeout=30) as client:

        async def worker(url: str) -> None:
            nonlocal hits
            for request_id in counter:
                body = call_body(name, arguments[request_id] if isinstance(arguments, list) else arguments, request_id)
                started = time.perf_counter()
                response = await client.post(url, json=body)
                if response.status_code != 200 or '"isError":true' in response.text or expect not in response.text:
                    raise SystemExit(f"{name} failed: {response.status_code} {response.text[:300]}")
                if any(null in response.text for null in UNCONSULTED):
                    raise SystemExit(f"{name} answered without Market Memory (no frame?): {response.text[:300]}")
                latencies.append(time.perf_counter() - started)
                hits += '\\"cache\\":\\"hit\\"' in response.text or '"cache":"hit"' in response.text

        started = time.perf_counter()
        await asyncio.gather(*(worker(urls[i % len(urls)]) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return total / elapsed, statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99) - 1] * 1000, hits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--symbols", type=int, default=5)
    parser.add_argument("--subscriber-tool", default="get_usage")
    args = parser.parse_args()
    exit_on_signals()

    with tempfile.TemporaryDirectory() as var_dir:
        env = prepare_env(var_dir)
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        # Enough included lookups that no timed evaluation is refused for quota (a throwaway database).
        unlimited = "from billing.models import Plan; Plan.objects.update(included_lookups=10**9)"
        subprocess.run([PY, "manage.py", "shell", "-c", unlimited], cwd=ROOT, env=env, check=True)
        key = manage(env, "issue_api_key", "bench@leroy.local", "--create-user")[-1]
        tickers = prepare_evidence(env, args.symbols)
        ports = [free_port(), free_port()]
        servers: list[subprocess.Popen] = []
        try:
            for port in ports:
                command = [str(Path(PY).parent / "uvicorn"), "leroy.asgi:application", "--port", str(port),
                           "--lifespan", "on", "--log-level", "warning", "--no-access-log"]  # fmt: skip
                servers.append(
                    subprocess.Popen(serving.tied_to_parent(command), cwd=ROOT, env=env, start_new_session=True)
                )
            pids = [server.pid for server in servers]  # tied_to_parent execs the command: each pid is its uvicorn
            urls = [f"http://127.0.0.1:{port}/api/mcp" for port in ports]
            for port in ports:
                for _ in range(600):  # uvicorn imports Django and builds the MCP server before listening
                    with contextlib.suppress(httpx2.TransportError):
                        if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                            break
                    time.sleep(0.1)
            asyncio.run(drive(urls, "test_simple_text", {}, None, 50, 4))  # warm both processes
            public = phase(pids, drive(urls, "test_simple_text", {}, None, args.requests, args.concurrency))
            keyed = phase(pids, drive(urls, args.subscriber_tool, {}, key, args.requests, args.concurrency))
            answered = '"evaluation_id"'
            setups = distinct_setups(tickers, args.requests + 20)
            asyncio.run(drive(urls, "evaluate_current_setup", setups[-20:], key, 20, 4, answered))  # warm the readers
            evaluate = phase(
                pids, drive(urls, "evaluate_current_setup", setups, key, args.requests, args.concurrency, answered)
            )
            repeated = phase(
                pids, drive(urls, "evaluate_current_setup", setups[0], key, args.requests, args.concurrency, answered)
            )
        finally:
            for server in servers:
                serving.stop_group(server, grace=30)
    database = "postgresql" if "DATABASE_URL" in env else "sqlite"
    print(
        f"mcp_throughput db={database} n={args.requests} c={args.concurrency} symbols={len(tickers)} "
        f"noop_public: {public[0]:.0f} req/s p50={public[1]:.1f}ms p99={public[2]:.1f}ms workers={public[4]} | "
        f"{args.subscriber_tool}_keyed: {keyed[0]:.0f} req/s p50={keyed[1]:.1f}ms p99={keyed[2]:.1f}ms "
        f"workers={keyed[4]} | evaluate distinct uncached: {evaluate[0]:.0f} req/s p50={evaluate[1]:.1f}ms "
        f"p99={evaluate[2]:.1f}ms cache_hits={evaluate[3]} workers={evaluate[4]} | evaluate one request repeated: "
        f"{repeated[0]:.0f} req/s cache_hits={repeated[3]}/{args.requests} workers={repeated[4]} | "
        f"keyed/noop={keyed[0] / public[0]:.2f} "
        f"evaluate_uncached/noop={evaluate[0] / public[0]:.2f} evaluate_cached/noop={repeated[0] / public[0]:.2f}"
    )


if __name__ == "__main__":
    main()
