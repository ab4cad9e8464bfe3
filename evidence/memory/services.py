"""Writes for Market Memory: builds (in process or as a Celery fan-out), registration and activation."""

import time
from collections.abc import Callable
from datetime import date
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.db.models import Q

from evidence.marketdata import store
from evidence.memory import build as memory
from evidence.memory.artifact import BuildPlan, partial_dir, plan_sha256
from evidence.memory.reader import ArtifactRefused, artifact_dir, verified_manifest
from evidence.models import MarketMemoryArtifact, MarketMemoryBuild
from evidence.publication import services as publication
from leroy.clock import now


def market_memory_build_dir(build_id: int) -> str:
    return f"market_memory/builds/{build_id}"


def market_memory_register(*, path: str, sha256: str, manifest: dict[str, Any]) -> MarketMemoryArtifact:
    """Record an artifact directory, `path` relative to the data directory (idempotent: a byte-identical rebuild
    returns the existing row). The row is the commit point: an artifact no row names is never served."""
    artifact, _ = MarketMemoryArtifact.objects.get_or_create(
        sha256=sha256,
        defaults={"version": manifest["version"], "path": path, "manifest": manifest, "built_at": now()},
    )
    return artifact


@transaction.atomic
def market_memory_activate(*, artifact: MarketMemoryArtifact) -> MarketMemoryArtifact:
    """Make one artifact the active one; readers swap to it on their next check (see selectors.memory_reader)."""
    locked = list(MarketMemoryArtifact.objects.select_for_update().filter(Q(is_active=True) | Q(pk=artifact.pk)))
    if artifact.pk not in {a.pk for a in locked}:
        raise MarketMemoryArtifact.DoesNotExist(f"artifact {artifact.pk} does not exist")
    MarketMemoryArtifact.objects.filter(is_active=True).exclude(pk=artifact.pk).update(is_active=False)
    MarketMemoryArtifact.objects.filter(pk=artifact.pk).update(is_active=True, activated_at=now())
    artifact.refresh_from_db()
    publication.artifact_published(artifact=artifact)
    return artifact


def market_memory_build_run(
    *,
    through: date | None = None,
    activate: bool = True,
    force: bool = False,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> MarketMemoryArtifact:
    """Build in this process: the same map and reduce the Celery chord runs, one symbol after another. `progress` is
    told each symbol mapped, then each step of the reduce ({"reduce": what was done, "elapsed_s": ...}).

    Unless forced, an artifact already built from the same plan by the same code is reused (and activated).
    """
    plan = memory.build_plan(through=through)
    if not force:
        existing = MarketMemoryArtifact.objects.filter(
            manifest__inputs__plan_sha256=plan_sha256(plan), manifest__code_sha256=memory.code_sha256()
        ).first()
        if existing is not None and store.exists(f"{existing.path}/manifest.json"):
            return market_memory_activate(artifact=existing) if activate else existing
    build = MarketMemoryBuild.objects.create(params=plan.as_dict(), partials_total=len(plan.tickers), created_at=now())
    build_dir = market_memory_build_dir(build.pk)
    started = time.monotonic()
    rows = 0
    try:
        for done, ticker in enumerate(plan.tickers, start=1):
            rows += memory.build_symbol_partial(plan, ticker, build_dir)["rows"]
            elapsed = time.monotonic() - started
            if progress is not None:
                progress(
                    {
                        "symbol": ticker,
                        "symbols_done": done,
                        "symbols_total": len(plan.tickers),
                        "rows": rows,
                        "elapsed_s": round(elapsed, 1),
                        "eta_s": round(elapsed / done * (len(plan.tickers) - done), 1),
                    }
                )
        MarketMemoryBuild.objects.filter(pk=build.pk).update(partials_done=len(plan.tickers))
        reduced = (
            None
            if progress is None
            else lambda step: progress({"reduce": step, "elapsed_s": round(time.monotonic() - started, 1)})
        )
        artifact = _finish_build(build.pk, activate=activate, progress=reduced)
    except BaseException as exc:
        MarketMemoryBuild.objects.filter(pk=build.pk).update(status="failed", error=str(exc)[:2000])
        raise
    return artifact


def _finish_build(
    build_id: int, *, activate: bool, progress: Callable[[str], None] | None = None
) -> MarketMemoryArtifact:
    build = MarketMemoryBuild.objects.get(pk=build_id)
    plan = BuildPlan(**build.params)
    path, sha, manifest = memory.reduce_partials(plan, market_memory_build_dir(build_id), progress)
    artifact = market_memory_register(path=path, sha256=sha, manifest=manifest)
    if activate:
        market_memory_activate(artifact=artifact)
    MarketMemoryBuild.objects.filter(pk=build_id).update(status="done", artifact=artifact)
    store.remove_tree(market_memory_build_dir(build_id))
    return artifact


def market_memory_build_start(*, through: date | None = None) -> MarketMemoryBuild:
    """Queue the production build: one Celery task per symbol partition; the last one to finish queues the reduce."""
    from evidence import tasks

    plan = memory.build_plan(through=through)
    with transaction.atomic():
        build = MarketMemoryBuild.objects.create(
            params=plan.as_dict(), partials_total=len(plan.tickers), created_at=now()
        )
        transaction.on_commit(
            lambda: [tasks.market_memory_symbol_task.delay(build.pk, ticker) for ticker in plan.tickers]
        )
    return build


def market_memory_partial_done(*, build_id: int) -> bool:
    """Count finished partials under the build's row lock; True exactly once, for the call that completes the set."""
    from evidence import tasks

    with transaction.atomic():
        build = MarketMemoryBuild.objects.select_for_update().get(pk=build_id)
        plan = BuildPlan(**build.params)
        done = sum(store.exists(f"{partial_dir(market_memory_build_dir(build_id), t)}/done.json") for t in plan.tickers)
        complete = done == build.partials_total and build.partials_done < build.partials_total
        MarketMemoryBuild.objects.filter(pk=build_id).update(partials_done=done)
        if complete:
            transaction.on_commit(lambda: tasks.market_memory_reduce_task.delay(build_id))
    return complete


def market_memory_reduce(*, build_id: int, activate: bool = True) -> MarketMemoryArtifact:
    try:
        return _finish_build(build_id, activate=activate)
    except BaseException as exc:
        MarketMemoryBuild.objects.filter(pk=build_id).update(status="failed", error=str(exc)[:2000])
        raise


REFUSAL_CACHE_KEY = "evidence:market_memory:refused"


def market_memory_verify_active() -> dict[str, Any] | None:
    """Re-hash the active artifact (manifest and every file it lists). On a mismatch it is deactivated at once, for
    every process (each drops its reader at its next activation check), and the refusal is recorded so the evidence
    tools can say why; returns the refusal, or None when the artifact verified (or none is active)."""
    active = MarketMemoryArtifact.objects.filter(is_active=True).first()
    if active is None:
        return None
    try:
        verified_manifest(artifact_dir(active.path, active.sha256), active.sha256)
    except (ArtifactRefused, OSError) as exc:
        refusal = {"reason": str(exc), "artifact_version": active.version, "artifact_sha256": active.sha256,
                   "refused_at": now().isoformat()}  # fmt: skip
        MarketMemoryArtifact.objects.filter(pk=active.pk).update(is_active=False)
        cache.set(REFUSAL_CACHE_KEY, refusal, timeout=None)
        return refusal
    return None


def market_memory_refusal() -> dict[str, Any] | None:
    """The last recorded refusal of an artifact that was active, if any (None also when the cache is down)."""
    try:
        refusal: dict[str, Any] | None = cache.get(REFUSAL_CACHE_KEY)
    except Exception:  # a cache outage must not turn an honest "unavailable" into a 500
        return None
    return refusal
