"""Overload: 150 concurrent metered calls from one account against a real uvicorn (2 workers), while a background
account makes sequential calls; the baseline, measured in the same run, is the background account alone.

Prints one line: the 5xx count (must be 0), the 503 count (admission refusals), the hot account's charged calls
against its ledger, and the background account's slowest and median latency over its 20 calls under load (with how
many of them started while the flood was still in flight) against the same over 20 calls alone. Both series run on
a warm account: its first calls (the month's period opened, the key looked up) are made, untimed, before either.
The tool is the test suite's `probe_metered` (a real lookup charge on the ledger, no evidence work), so the figure
is the admission and billing path, not Market Memory. Exits 1 when a 5xx appears or the ledger drifts. Runs on
PostgreSQL in a throwaway database (`test_<name>` of DATABASE_URL), created here and dropped, with the server
stopped, on any exit.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leroy_bench .venv/bin/python bench/overload.py
"""

import asyncio
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

ROOT = Path(__file__).resolve().parents[1]
# The server's limits: a small pool, so that 150 concurrent calls are far more than it holds.
SERVER_ENV = {
    "LEROY_DB_POOL_MAX": "8",
    "LEROY_ADMISSION_MAX_INFLIGHT": "6",
    "LEROY_ADMISSION_PER_PRINCIPAL": "2",
    # Short enough that the flood outlasts it even when a charge is fast: 150 calls at 2 per principal per worker
    # take longer than 0.5 s, so some must be refused, which is what the figure is about.
    "LEROY_ADMISSION_WAIT_SECONDS": "0.5",
    "LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE": "100000",  # measure admission, not the rate limit
}
MODERN = "2026-07-28"


@dataclass
class Calls:
    statuses: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    started: list[float] = field(default_factory=list)  # perf_counter when each call was sent
    ended: list[float] = field(default_factory=list)  # and when its answer (or transport error) came
    served: int = 0  # 200 with a result that is not an error
    transport_errors: int = 0

    @property
    def five_xx(self) -> int:
        return sum(1 for s in self.statuses if s >= 500 and s != 503)

    @property
    def refused(self) -> int:
        return self.statuses.count(503)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def _body(n: int) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "overload", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    arguments = {"side": "buy"}
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "probe_metered", "arguments": arguments, "_meta": meta},
    }


def _is_served(response: httpx2.Response) -> bool:
    if response.status_code != 200:
        return False
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    result = json.loads(text).get("result") or {}
    return result.get("isError") is False


async def _call(http: httpx2.AsyncClient, key: str, n: int, calls: Calls) -> None:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "probe_metered",
    }
    started = time.perf_counter()
    calls.started.append(started)
    try:
        response = await http.post("/api/mcp", json=_body(n), headers=headers)
    except httpx2.TransportError:
        calls.transport_errors += 1
        return
    finally:
        calls.ended.append(time.perf_counter())
    calls.latencies.append(time.perf_counter() - started)
    calls.statuses.append(response.status_code)
    calls.served += _is_served(response)


async def _sequential(http: httpx2.AsyncClient, key: str, count: int, calls: Calls, gap: float) -> None:
    for n in range(count):
        await _call(http, key, n, calls)
        await asyncio.sleep(gap)


WARMUP_CALLS = 3


async def background_alone(url: str, key: str, count: int = 20) -> Calls:
    """`count` sequential calls, after WARMUP_CALLS untimed ones (the account's first charge opens its month)."""
    calls = Calls()
    async with httpx2.AsyncClient(base_url=url, timeout=30) as http:
        await _sequential(http, key, WARMUP_CALLS, Calls(), gap=0.05)
        await _sequential(http, key, count, calls, gap=0.05)
    return calls


async def overload(
    url: str, hot_key: str, background_key: str, hot: int = 150, background: int = 20
) -> tuple[Calls, Calls]:
    """`hot` concurrent calls from one key while another key makes `background` sequential calls."""
    hot_calls, background_calls = Calls(), Calls()
    limits = httpx2.Limits(max_connections=hot + 10, max_keepalive_connections=hot + 10)
    async with httpx2.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
        flood = [asyncio.create_task(_call(http, hot_key, n, hot_calls)) for n in range(hot)]
        await asyncio.sleep(0.05)  # the flood is in flight before the background account starts
        await _sequential(http, background_key, background, background_calls, gap=0.05)
        await asyncio.gather(*flood)
    return hot_calls, background_calls


def main() -> int:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/leroy_bench")
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"  # the server registers the metered probe tool
    import django

    django.setup()
    from cleanup import (  # bench/ is the script's directory (the tests import this module)
        check_tree,
        exit_on_signals,
        throwaway_database,
    )
    from django.db import connection

    check_tree()

    if connection.vendor != "postgresql":
        print("overload: needs PostgreSQL (set DATABASE_URL)")
        return 1
    exit_on_signals()
    with throwaway_database():
        return measure()


def measure() -> int:
    from accounts import services as accounts
    from billing import selectors, services
    from billing.models import Plan, UsageEvent
    from tests.processes import uvicorn_server

    services.plans_ensure()
    keys = {}
    for name in ("hot", "background"):
        email = f"overload-{name}-{time.time_ns()}@example.com"
        user = accounts.user_create(email=email, password=secrets.token_urlsafe(16))
        accounts.mcp_activate(user=user)
        services.plan_assign(user=user, plan=Plan.objects.get(code="pro"))
        keys[name] = (user, accounts.api_key_create(user=user, name="bench").plaintext)
    with uvicorn_server(workers=2, **SERVER_ENV) as server:
        alone = asyncio.run(background_alone(server.url, keys["background"][1]))
        hot, background = asyncio.run(overload(server.url, keys["hot"][1], keys["background"][1]))
    charged = UsageEvent.objects.filter(user=keys["hot"][0]).count()
    during = sum(sent < max(hot.ended) for sent in background.started)
    drift = selectors.ledger_drift()
    five_xx = hot.five_xx + background.five_xx + alone.five_xx
    print(
        f"overload 150 concurrent from one account: 5xx={five_xx} 503={hot.refused + background.refused} "
        f"hot_served={hot.served} hot_charged={charged} transport_errors={hot.transport_errors} "
        f"background max={max(background.latencies) * 1000:.0f} ms "
        f"p50={percentile(background.latencies, 50) * 1000:.0f} ms "
        f"({during}/20 sent while the flood was in flight; alone max={max(alone.latencies) * 1000:.0f} ms "
        f"p50={percentile(alone.latencies, 50) * 1000:.0f} ms; served {background.served}/20) "
        f"ledger_drift={len(drift)}"
    )
    return 1 if five_xx or drift or charged != hot.served else 0


if __name__ == "__main__":
    sys.exit(main())
