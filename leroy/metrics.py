"""Prometheus metrics kept by each process (the ground: imports no app; the scrape-time state is `leroy.ops`).

Counters and histograms live in the process that served the request. With N uvicorn workers, set
`PROMETHEUS_MULTIPROC_DIR` to an empty directory shared by them (emptied at every start): each worker then writes
its samples there and `/metrics`, whichever worker answers, sums them all. Without it, each scrape sees only the
worker that answered it. The state gauges (queue depth, running sandbox jobs, artifact age, ledger transfers) are
computed by the answering worker from the database and the broker, so they are whole in either mode.
"""

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

TOOL_CALLS = Counter("leroy_mcp_tool_calls", "MCP tool calls by tool and outcome", ["tool", "outcome"])
TOOL_LATENCY = Histogram(
    "leroy_mcp_tool_call_seconds",
    "MCP tool call latency at the transport, by tool and outcome",
    ["tool", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RATE_LIMIT_REFUSALS = Counter("leroy_rate_limit_refusals", "Requests refused with 429 by a rate limit", ["limit"])
RATE_LIMIT_FAIL_OPEN = Counter(
    "leroy_rate_limit_fail_open", "Rate-limit decisions taken per process because the shared cache failed"
)
ADMISSION_REFUSALS = Counter(
    "leroy_admission_refusals", "Requests refused with 503 by the in-flight admission limits", ["reason"]
)
DEPENDENCY_ERRORS = Counter(
    "leroy_dependency_errors",
    "Calls refused (503 or in band) and sends left to a sweep because a dependency failed",
    ["dependency"],
)
PROCESS_METRICS: tuple[Counter | Histogram, ...] = (
    TOOL_CALLS,
    TOOL_LATENCY,
    RATE_LIMIT_REFUSALS,
    RATE_LIMIT_FAIL_OPEN,
    ADMISSION_REFUSALS,
    DEPENDENCY_ERRORS,
)


def exposition(*extra: Collector) -> bytes:
    """The text exposition: this process's (or, in multi-process mode, every worker's) samples plus `extra`."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        for metric in PROCESS_METRICS:
            registry.register(metric)
    for collector in extra:
        registry.register(collector)
    return generate_latest(registry)
