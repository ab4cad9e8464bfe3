"""Operations endpoints: `/healthz` (the process is up), `/readyz` (it can serve), `/metrics` (Prometheus).

`/readyz` answers JSON with one entry per check and 503 when a required one fails. Required: the database, the
broker, migrations applied, an active Market Memory artifact this process has verified, and (while the regular
session is open) a fresh frame feed. The cache is reported (`ok` or `degraded`: rate limits are failing open) but
never makes the node unready, because the limiter keeps serving without it; so is the publication log's RFC 3161
token for its latest checkpoint (`degraded` when the time-stamp authority failed).
"""

import hmac
import ipaddress
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leroy import metrics, ratelimit
from leroy.clock import now
from leroy.errors import DomainError

Check = Callable[[], dict[str, Any]]


class CheckFailed(Exception):
    pass


def _database() -> dict[str, Any]:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {}


def _migrations() -> dict[str, Any]:
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise CheckFailed(
            f"{len(pending)} migration(s) not applied, first {pending[0][0].app_label}.{pending[0][0].name}"
        )
    return {}


def _cache() -> dict[str, Any]:
    if ratelimit.degraded():
        return {"status": "degraded", "detail": "rate limits are failing open with per-process windows"}
    try:
        cache.add("leroy:readyz", 1, timeout=10)  # add raises when the cache fails (get/set fail soft)
        if cache.get("leroy:readyz") != 1:
            raise CheckFailed("the cache did not return what was written")
    except Exception as error:
        return {"status": "degraded", "detail": f"{type(error).__name__}: rate limits will fail open"}
    return {}


def broker_connection() -> Any:
    from leroy.celery import app

    return app.connection_for_write()


def _broker() -> dict[str, Any]:
    with broker_connection() as connection:
        connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
    return {}


def _artifact() -> dict[str, Any]:
    from evidence.memory.selectors import memory_reader  # verified (every file against its manifest hash) when loaded

    reader = memory_reader()
    return {"version": reader.version, "sha256": reader.sha256}


def _feed() -> dict[str, Any]:
    from evidence.live.frames import MINUTE, feed_universe, open_session
    from evidence.models import Frame

    at = now()
    window = open_session(at)
    if window is None:
        return {"status": "not_applicable", "detail": "the regular session is closed"}
    newest = Frame.objects.filter(symbol__in=feed_universe(), session=window.session).aggregate(t=Max("source_time"))
    if newest["t"] is None:
        raise CheckFailed(f"no frame yet for the {window.session} session")
    age = (at - (newest["t"] + MINUTE)).total_seconds()
    if age > settings.LEROY_FRAME_STALE_SECONDS:
        raise CheckFailed(f"the newest frame is {age:.0f} s old (limit {settings.LEROY_FRAME_STALE_SECONDS} s)")
    return {"age_seconds": round(age, 1)}


def _log_timestamp() -> dict[str, Any]:
    """The latest checkpoint's RFC 3161 token: reported, never required (the log publishes without one)."""
    from evidence.publication.selectors import timestamp_authority

    authority = timestamp_authority()
    latest = authority.latest_checkpoint
    if authority.kind == "none":
        return {"status": "not_applicable", "detail": "no time-stamp authority configured (LEROY_LOG_TSA_URL)"}
    if latest is None:
        return {"status": "not_applicable", "detail": "the log is empty"}
    if latest.status != "granted":
        detail = f"the latest checkpoint (size {latest.tree_size}) has no token: {latest.detail or latest.status}"
        return {"status": "degraded", "detail": detail[:300]}
    return {"tree_size": latest.tree_size, "gen_time": latest.gen_time.isoformat() if latest.gen_time else None}


CHECKS: dict[str, tuple[Check, bool]] = {  # name: (check, required)
    "database": (_database, True),
    "migrations": (_migrations, True),
    "cache": (_cache, False),
    "broker": (_broker, True),
    "market_memory": (_artifact, True),
    "frame_feed": (_feed, True),
    "log_timestamp": (_log_timestamp, False),
}


def readiness() -> tuple[bool, dict[str, Any]]:
    """(ready, one entry per check). A check that raises fails with its error class and message, no traceback."""
    results: dict[str, Any] = {}
    ready = True
    for name, (check, required) in CHECKS.items():
        started = time.perf_counter()
        try:
            entry = {"status": "ok", **check()}
        except Exception as error:
            entry = {"status": "fail", "detail": f"{type(error).__name__}: {error}"[:300]}
            if isinstance(error, DomainError):  # e.g. evidence_unavailable: its code and reason, as the tools say it
                entry.update(code=error.code, **{k: v for k, v in error.details.items() if isinstance(v, str)})
        entry.update(required=required, ms=round((time.perf_counter() - started) * 1000, 1))
        if entry["status"] == "fail" and required:
            ready = False
        results[name] = entry
    return ready, results


@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers. Never touches a dependency (a down database must not restart the node)."""
    return HttpResponse("ok", content_type="text/plain")


@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    ready, checks = readiness()
    return JsonResponse({"status": "ready" if ready else "unready", "checks": checks}, status=200 if ready else 503)


# --- metrics -------------------------------------------------------------------------------------------------


def celery_queue_depths() -> dict[str, int]:
    """Messages waiting in each of Leroy's queues (`passive` declare: a queue nobody declared yet has 0)."""
    depths: dict[str, int] = {}
    with broker_connection() as connection:
        connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
        channel = connection.default_channel
        for queue in settings.LEROY_CELERY_QUEUES:
            try:
                depths[queue] = channel.queue_declare(queue=queue, passive=True).message_count
            except Exception:  # not declared yet
                depths[queue] = 0
    return depths


class StateCollector(Collector):
    """Gauges read at scrape time; a failing source shows as `leroy_metrics_source_up 0`, never as an error."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "leroy_metrics_source_up", "Whether a state source answered this scrape", labels=["source"]
        )
        for name, source in (
            ("celery_queues", self._queues),
            ("sandbox_jobs", self._sandbox),
            ("market_memory", self._artifact),
            ("ledger", self._ledger),
        ):
            try:
                families = list(source())
            except Exception:
                up.add_metric([name], 0)
            else:
                up.add_metric([name], 1)
                yield from families
        yield up

    def _queues(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("leroy_celery_queue_depth", "Messages waiting in each Celery queue", labels=["queue"])
        for queue, count in celery_queue_depths().items():
            depth.add_metric([queue], count)
        yield depth

    def _sandbox(self) -> Iterator[Metric]:
        from backtests.models import OptimizationRun, Report

        running = (
            Report.objects.filter(status="EXECUTING").count()
            + OptimizationRun.objects.filter(status="EXECUTING").count()
        )
        yield GaugeMetricFamily("leroy_sandbox_jobs_running", "Backtests and grid points executing", value=running)

    def _artifact(self) -> Iterator[Metric]:
        from evidence.models import MarketMemoryArtifact

        built_at = MarketMemoryArtifact.objects.filter(is_active=True).values_list("built_at", flat=True).first()
        if built_at is not None:
            yield GaugeMetricFamily(
                "leroy_market_memory_artifact_age_seconds",
                "Seconds since the active Market Memory artifact was built",
                value=(now() - built_at).total_seconds(),
            )

    def _ledger(self) -> Iterator[Metric]:
        from billing.models import Transfer

        transfers = CounterMetricFamily("leroy_ledger_transfers", "Ledger transfers by code", labels=["code"])
        for row in Transfer.objects.values("code").annotate(n=Count("id")).order_by("code"):
            transfers.add_metric([row["code"]], row["n"])
        yield transfers


def _metrics_allowed(request: HttpRequest) -> bool:
    token = settings.LEROY_METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        return hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


@require_safe
@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; with LEROY_METRICS_TOKEN set it needs that bearer, otherwise a loopback caller."""
    if not _metrics_allowed(request):
        response = HttpResponse("forbidden\n", status=403 if not settings.LEROY_METRICS_TOKEN else 401)
        if settings.LEROY_METRICS_TOKEN:
            response["WWW-Authenticate"] = 'Bearer realm="leroy-metrics"'
        return response
    return HttpResponse(metrics.exposition(StateCollector()), content_type="text/plain; version=0.0.4; charset=utf-8")
