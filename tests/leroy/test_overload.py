"""150 concurrent metered calls from one account through a real uvicorn (2 workers) on a small pool: admission
refuses with 503 instead of failing with 500, another account stays fast, the ledger stays exact."""

import asyncio
import time
from io import StringIO

import pytest
from django.core.management import call_command

from accounts import services as accounts
from bench.overload import SERVER_ENV, WARMUP_CALLS, background_alone, overload
from billing import selectors, services
from billing.models import Plan, UsageEvent
from tests.processes import uvicorn_server

pytestmark = pytest.mark.django_db(transaction=True)

BACKGROUND_SLOWEST_BOUND = 1.5  # seconds; before admission limits another account waited 8.3 s at 110 concurrent


def account(email: str):
    user = accounts.user_create(email=email, password="correct horse battery staple")
    accounts.mcp_activate(user=user)
    services.plan_assign(user=user, plan=Plan.objects.get(code="pro"))
    return user, accounts.api_key_create(user=user, name="agent").plaintext


def test_150_concurrent_calls_from_one_account_get_503_not_500_and_leave_others_and_the_ledger_intact():
    services.plans_ensure()
    hot_user, hot_key = account("hot@example.com")
    background_user, background_key = account("background@example.com")
    started = time.monotonic()
    with uvicorn_server(workers=2, **SERVER_ENV) as server:
        alone = asyncio.run(background_alone(server.url, background_key))
        hot, background = asyncio.run(overload(server.url, hot_key, background_key))
        log = server.output()
    elapsed = time.monotonic() - started

    assert hot.transport_errors == 0
    assert len(hot.statuses) == 150
    assert set(hot.statuses) <= {200, 503}
    assert hot.five_xx == background.five_xx == alone.five_xx == 0
    assert hot.refused > 0  # the flood really was past the limits
    assert hot.served == hot.statuses.count(200)
    assert background.statuses == [200] * 20
    assert background.served == 20
    assert max(background.latencies) < BACKGROUND_SLOWEST_BOUND
    wait = float(SERVER_ENV["LEROY_ADMISSION_WAIT_SECONDS"])
    assert max(hot.latencies) < wait + 3.0  # a refusal comes within the admission wait (plus scheduling)
    assert "PoolTimeout" not in log
    assert "Traceback" not in log
    assert UsageEvent.objects.filter(user=hot_user).count() == hot.served
    assert UsageEvent.objects.filter(user=background_user).count() == WARMUP_CALLS + 20 + 20
    assert selectors.ledger_drift() == []
    out = StringIO()
    call_command("verify_ledger", stdout=out)
    assert out.getvalue().startswith("ledger ok")
    assert elapsed < 60
