"""Dry runs execute on the `dryruns` workers: one in flight per account, a per-worker cap, `busy` beyond."""

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async

from backtests import sandbox, services, tasks
from backtests.models import DryRun, DryRunPass, Status
from leroy.clock import now
from tests.backtests.conftest import SMA_CROSS, expected_layers
from tests.backtests.test_tools import client, ok, refused


def test_dry_runs_are_routed_to_their_own_queue():
    from leroy.celery import app

    assert tasks.dry_run.name == "backtests.dry_run"
    assert app.amqp.router.route({}, tasks.dry_run.name)["queue"].name == "dryruns"


@pytest.mark.django_db(transaction=True)
def test_parallel_dry_runs_of_one_account_let_one_in_and_answer_busy(owner, monkeypatch):
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)  # queued, not yet taken by a worker
    barrier, answers = threading.Barrier(6), []

    def submit():
        barrier.wait()
        try:
            answers.append(services.dry_run_submit(user=owner, code=SMA_CROSS).status)
        except services.BacktestError as error:
            answers.append((error.code, error.details))

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(answers, key=str) == [("busy", {"retry_after_seconds": 5})] * 5 + [Status.PENDING]
    assert DryRun.objects.filter(user=owner).count() == 1


@pytest.mark.django_db
def test_a_full_worker_answers_busy_and_runs_nothing(owner, settings, tmp_path, monkeypatch):
    settings.LEROY_VAR_DIR = tmp_path
    settings.LEROY_DRY_RUNS_PER_WORKER = 1
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)
    run = services.dry_run_submit(user=owner, code=SMA_CROSS)

    with sandbox.worker_slot(1) as held:
        services.dry_run_execute(run_id=str(run.pk))

    run.refresh_from_db()
    assert held == 0
    assert (run.status, run.busy, run.outcome) == (Status.CANCELLED, True, None)
    assert DryRunPass.objects.exists() is False


LOOP = "class Loop(bt.Strategy):\n    def next(self):\n        while True:\n            pass\n"


@pytest.mark.django_db
def test_a_dry_run_that_never_ends_is_told_cpu_limit_by_its_own_limit(owner, settings, monkeypatch):
    settings.LEROY_DRY_RUN_CPU_SECONDS = 1
    settings.LEROY_SANDBOX_CPU_SECONDS = 10  # a backtest's: not the dry run's
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)
    run = services.dry_run_submit(user=owner, code=LOOP)

    services.dry_run_execute(run_id=str(run.pk))

    run.refresh_from_db()
    assert run.status == Status.COMPLETED
    assert run.outcome["success"] is False
    assert run.outcome["error"] == {
        "code": "cpu_limit",
        "message": "the strategy exceeded its CPU-time limit (1 s) and was killed",
        "line": None,
    }
    assert run.outcome["sandbox_layers"] == expected_layers()
    assert DryRunPass.objects.exists() is False


@pytest.mark.django_db
def test_a_dry_run_nobody_took_or_whose_worker_vanished_does_not_block_the_account(owner, monkeypatch):
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)
    queued = services.dry_run_submit(user=owner, code=SMA_CROSS)
    DryRun.objects.filter(pk=queued.pk).update(created_at=now() - timedelta(minutes=5))
    running = services.dry_run_submit(user=owner, code=SMA_CROSS)
    DryRun.objects.filter(pk=running.pk).update(status=Status.EXECUTING, started_at=now() - timedelta(hours=1))

    services.stale_jobs_reap()

    queued.refresh_from_db()
    running.refresh_from_db()
    assert (queued.status, queued.busy) == (Status.CANCELLED, True)
    assert (running.status, running.outcome["error"]["code"]) == (Status.FAILED, "worker_lost")
    assert services.dry_run_submit(user=owner, code=SMA_CROSS).status == Status.PENDING


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_over_mcp_a_dry_run_runs_on_the_worker_and_returns_its_result(mcp_http, owner, write_key):
    async with client(mcp_http, write_key) as session:
        dry = await ok(session, "run_dry_run_backtest", {"code": SMA_CROSS})

    run = await DryRun.objects.aget()
    assert dry["success"] is True and dry["result"]["bars"] == {"DRYA": 260, "DRYB": 260}
    assert (run.status, run.outcome) == (Status.COMPLETED, dry)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_over_mcp_a_queued_dry_run_no_worker_takes_answers_busy(
    mcp_http, owner, write_key, settings, monkeypatch
):
    settings.LEROY_DRY_RUN_QUEUE_SECONDS = 0.3
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)

    async with client(mcp_http, write_key) as session:
        _, payload = await refused(session, "run_dry_run_backtest", {"code": SMA_CROSS})

    run = await DryRun.objects.aget()
    assert payload["error"] == {
        "code": "busy",
        "message": "No dry-run worker was free. Retry in 5 seconds.",
        "retry_after_seconds": 5,
    }
    assert (run.status, run.busy) == (Status.CANCELLED, True)
    await sync_to_async(services.dry_run_execute)(run_id=str(run.pk))  # a late worker runs nothing
    await run.arefresh_from_db()
    assert run.outcome is None


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_a_read_only_key_cannot_dry_run(mcp_http, owner, api_key):
    async with mcp_http(api_key) as http:
        response = await http.post(
            "/api/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                  "params": {"name": "run_dry_run_backtest", "arguments": {"code": SMA_CROSS}}},
            headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"},
        )  # fmt: skip

    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert await DryRun.objects.aexists() is False


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_a_dry_run_whose_caller_goes_away_while_it_is_queued_never_runs_and_frees_the_account(owner, monkeypatch):
    from backtests.schemas import DryRunArgs
    from leroy.mcp.registry import REGISTRY, direct_call

    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)  # queued, not yet taken by a worker
    call = direct_call(tool="run_dry_run_backtest", user_id=owner.pk, client_id="test")
    waiting = asyncio.ensure_future(REGISTRY["run_dry_run_backtest"].handler(call, DryRunArgs(code=SMA_CROSS)))
    while not await DryRun.objects.aexists():
        await asyncio.sleep(0.05)

    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting

    run = await DryRun.objects.aget()
    assert (run.status, run.busy, run.outcome) == (Status.CANCELLED, False, None)
    await sync_to_async(services.dry_run_execute)(run_id=str(run.pk))  # a late worker runs nothing
    await run.arefresh_from_db()
    assert (run.status, run.outcome) == (Status.CANCELLED, None)
    again = await sync_to_async(services.dry_run_submit)(user=owner, code=SMA_CROSS)
    assert again.status == Status.PENDING


@pytest.mark.django_db(transaction=True)
def test_a_running_dry_run_that_is_abandoned_has_its_job_killed_and_answers_nothing(owner, settings, monkeypatch):
    settings.LEROY_DRY_RUN_CPU_SECONDS = 30
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)
    run = services.dry_run_submit(user=owner, code=LOOP)
    worker = threading.Thread(target=services.dry_run_execute, kwargs={"run_id": str(run.pk)})
    worker.start()
    deadline = time.monotonic() + 30
    while DryRun.objects.get(pk=run.pk).status != Status.EXECUTING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # the job is spinning

    abandoned_at = time.monotonic()
    assert services.dry_run_abandon(run_id=run.pk) is True
    worker.join(timeout=20)

    assert worker.is_alive() is False
    assert time.monotonic() - abandoned_at < 5  # not the 30 CPU-seconds its limit allows
    run.refresh_from_db()
    assert (run.status, run.outcome) == (Status.CANCELLED, None)
    assert DryRunPass.objects.exists() is False


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
async def test_a_dry_run_wait_ends_with_invalid_token_once_its_key_is_revoked_and_the_dry_run_stops(
    mcp_http, owner, write_key, settings, monkeypatch
):
    from accounts import services as accounts

    settings.LEROY_DRY_RUN_QUEUE_SECONDS = 30  # queued, never taken: only the revoke can end the wait
    monkeypatch.setattr(tasks.dry_run, "delay", lambda run_id: None)
    key = await sync_to_async(lambda: owner.api_keys.get())()

    async def revoke_soon() -> float:
        while not await DryRun.objects.aexists():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        await sync_to_async(accounts.api_key_revoke)(user=owner, number=key.number)
        return time.monotonic()

    revoker = asyncio.ensure_future(revoke_soon())
    async with client(mcp_http, write_key) as session:
        _, payload = await refused(session, "run_dry_run_backtest", {"code": SMA_CROSS})
    revoked_at = await revoker

    assert payload["error"]["code"] == "invalid_token"
    assert time.monotonic() - revoked_at < 3
    run = await DryRun.objects.aget()
    assert (run.status, run.outcome) == (Status.CANCELLED, None)
