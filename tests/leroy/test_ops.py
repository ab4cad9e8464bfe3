"""/healthz (liveness), /readyz (one JSON entry per check, 503 when a required one fails) and /metrics."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from billing import services as billing
from leroy.celery import app as celery_app

pytestmark = pytest.mark.django_db


@pytest.fixture
def broker_on(monkeypatch):
    def use(url: str) -> None:
        monkeypatch.setattr(celery_app.conf, "broker_url", url)

    return use


def test_healthz_is_liveness_and_touches_nothing(client: Client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")

    assert response.status_code == 200
    assert response.content == b"ok"


def test_readyz_is_ready_with_a_verified_artifact_a_fresh_feed_and_redis(client: Client, fed_world, broker_on):
    from django.conf import settings

    broker_on(settings.LEROY_TEST_REDIS_URL)
    response = client.get("/readyz")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    statuses = {name: check["status"] for name, check in body["checks"].items()}
    assert statuses == {
        "database": "ok",
        "migrations": "ok",
        "cache": "ok",
        "broker": "ok",
        "market_memory": "ok",
        "frame_feed": "ok",
        "log_timestamp": "not_applicable",
    }
    assert body["checks"]["market_memory"]["sha256"] == fed_world.sha256
    assert body["checks"]["cache"]["required"] is False
    assert response["Cache-Control"].startswith("max-age=0")


def test_readyz_is_503_without_an_artifact_and_with_the_broker_down(client: Client, broker_on, dead_redis_url):
    broker_on(dead_redis_url)
    response = client.get("/readyz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert response.json()["status"] == "unready"
    assert checks["broker"]["status"] == "fail"
    assert "OperationalError" in checks["broker"]["detail"]
    assert checks["market_memory"] == {
        "status": "fail",
        "detail": "MemoryUnavailable: no Market Memory artifact is active",
        "code": "evidence_unavailable",
        "reason": "no artifact is active",
        "required": True,
        "ms": checks["market_memory"]["ms"],
    }
    assert checks["database"]["status"] == "ok"
    assert checks["broker"]["ms"] < 5000  # bounded, not the broker's default retry loop


def test_readyz_reports_a_down_cache_as_degraded_and_stays_ready(client: Client, fed_world, redis_down):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"]["cache"]["status"] == "degraded"
    assert response.json()["checks"]["cache"]["detail"].startswith("ConnectionError")


def test_readyz_is_503_when_the_feed_is_stale_during_the_session(client: Client, fed_world):
    with time_machine.travel(fed_world.replay + timedelta(minutes=10), tick=False):
        response = client.get("/readyz")

    assert response.status_code == 503
    feed = response.json()["checks"]["frame_feed"]
    assert feed["status"] == "fail"
    assert "s old (limit 180 s)" in feed["detail"]


def test_metrics_show_tool_calls_queues_ledger_and_sandbox_to_loopback(client: Client, owner):
    billing.plans_ensure()
    from django.db import transaction

    with transaction.atomic():
        billing.lookup_charge(user=owner, tool="probe", units=1, request_fingerprint="f", client_request_id=None)
    response = client.get("/metrics")

    assert response.status_code == 200
    text = response.content.decode()
    assert 'leroy_ledger_transfers_total{code="charge"} 1.0' in text
    assert 'leroy_celery_queue_depth{queue="backtests"} 0.0' in text
    assert "leroy_sandbox_jobs_running 0.0" in text
    assert 'leroy_metrics_source_up{source="ledger"} 1.0' in text
    assert 'leroy_metrics_source_up{source="market_memory"} 1.0' in text
    assert "# TYPE leroy_rate_limit_fail_open_total counter" in text


def test_metrics_refuse_a_remote_caller_without_a_token(client: Client):
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.7").status_code == 403


def test_metrics_token_is_required_when_set_even_from_loopback(client: Client, settings):
    settings.LEROY_METRICS_TOKEN = "s3cret-metrics-token"

    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    remote = client.get("/metrics", REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION="Bearer s3cret-metrics-token")
    assert remote.status_code == 200


def test_readyz_is_503_while_a_migration_is_not_applied(client: Client):
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    recorder = MigrationRecorder(connection)
    last = recorder.migration_qs.filter(app="billing").order_by("-id").first()
    recorder.record_unapplied("billing", last.name)  # rolled back with the test's transaction
    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["checks"]["migrations"]["status"] == "fail"
    assert response.json()["checks"]["migrations"]["detail"] == (
        f"CheckFailed: 1 migration(s) not applied, first billing.{last.name}"
    )
