import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.test import override_settings

from accounts import services
from accounts.models import User
from leroy import ratelimit
from leroy.settings import redis_cache
from tests import migrated

MCP_URL = "http://127.0.0.1/api/mcp"
# The session-scoped synthetic evidence world (fixtures `world_files`, `world`, `fed_world`).
pytest_plugins = ["tests.evidence.world"]


def pytest_configure(config: pytest.Config) -> None:
    # The fault scripts' and the evidence world's SQLite databases copy one migrated template (tests/migrated.py).
    directory = tempfile.mkdtemp(prefix="leroy-test-migrated-")
    os.environ[migrated.TEMPLATE_ENV] = str(Path(directory) / "template.sqlite3")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(Path(os.environ.pop(migrated.TEMPLATE_ENV)).parent, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    # The report header is hidden under -q, and which database ran the suite must always be visible.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in _environment_lines():
            reporter.write_line(line)


def _environment_lines() -> list[str]:
    db = settings.DATABASES["default"]
    where = f"{db['HOST']}:{db['PORT']}/{db['NAME']}" if settings.LEROY_TEST_DATABASE == "PostgreSQL" else db["NAME"]
    lines = [f"leroy database: {settings.LEROY_TEST_DATABASE} ({where})"]
    if settings.LEROY_TEST_DATABASE == "SQLite":
        lines.append("leroy database: PostgreSQL did not answer on 127.0.0.1:5432 (or DATABASE_URL chose SQLite)")
    lines.append(
        f"leroy redis: {'127.0.0.1:6379' if settings.LEROY_TEST_REDIS_URL else 'not answering; Redis tests skip'}"
    )
    return lines


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _clear_cache() -> Iterator[None]:
    cache.clear()
    ratelimit.degraded_reset()
    yield
    cache.clear()
    ratelimit.degraded_reset()


@pytest.fixture
def dead_redis_url() -> str:
    """A Redis URL on a loopback port where nothing listens (Redis down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@contextlib.contextmanager
def sending_to(url: str) -> Iterator[None]:
    """Celery sends for real (not eagerly) to `url`; its producer pools, made for the broker of their time, are
    made anew on both sides."""
    from leroy.celery import app

    kept = {key: app.conf[key] for key in ("task_always_eager", "broker_url")}
    app._pool = app.amqp._producer_pool = None
    app.conf.update(task_always_eager=False, broker_url=url)
    try:
        yield
    finally:
        app._pool = app.amqp._producer_pool = None
        app.conf.update(kept)


@pytest.fixture
def broker_down(dead_redis_url: str) -> Iterator[None]:
    """Celery's broker (Redis) does not answer."""
    with sending_to(dead_redis_url):
        yield


@pytest.fixture
def redis_down(dead_redis_url: str) -> Iterator[str]:
    """The cache is Redis as production configures it, and Redis does not answer."""
    with override_settings(CACHES={"default": redis_cache(dead_redis_url)}):
        yield dead_redis_url


@pytest.fixture
def owner(db: None) -> User:
    user = services.user_create(email="alice@example.com", password="correct horse battery staple")
    services.mcp_activate(user=user)
    return user


@pytest.fixture
def outsider(db: None) -> User:
    user = services.user_create(email="charlie@example.com", password="correct horse battery staple")
    services.mcp_activate(user=user)
    return user


@pytest.fixture
def api_key(owner: User) -> str:
    return services.api_key_create(user=owner, name="agent").plaintext


@pytest.fixture
def write_key(owner: User) -> str:
    return services.api_key_create(user=owner, name="writer", write=True).plaintext


@pytest.fixture
async def mcp_http() -> AsyncIterator[Callable[..., httpx2.AsyncClient]]:
    """An HTTP client factory bound to a fresh in-process Leroy ASGI app (one session manager per test)."""
    from leroy.asgi import LeroyASGI

    app = LeroyASGI()

    def make(key: str | None = None, **headers: str) -> httpx2.AsyncClient:
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app, client=("203.0.113.7", 50000)),
            base_url="http://127.0.0.1",
            headers=headers,
        )

    async with app.session_manager.run():
        yield make
    # Test bodies' own async ORM calls run on asgiref's shared thread; close its connection so the test
    # database can be dropped at the end of the run.
    await sync_to_async(connections.close_all)()
