"""Test settings: PostgreSQL when it answers on 127.0.0.1:5432, else SQLite; the transport's test tools."""

import os
import socket
import tempfile


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
    except OSError:
        return False
    return True


os.environ.setdefault("SECRET_KEY", "leroy-tests-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz")
if not os.environ.get("DATABASE_URL") and _answers(5432):
    os.environ["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/leroy"
os.environ.pop("REDIS_URL", None)  # the cache under test is chosen per test; production Redis is never touched
os.environ.pop("LEROY_CLOCK", None)
# A fixed publication-log key for tests only (never written into the var dir), and the origin it is named for.
os.environ.setdefault(
    "LEROY_LOG_SIGNING_KEY", "PRIVATE+KEY+test.leroy.invalid/log+775b8874+AYXDLWSYFsW2zIEwh4kXC7hOuq9iwYaHJCc7hfJj25pG"
)
os.environ.setdefault("LEROY_LOG_ORIGIN", "test.leroy.invalid/log")

from leroy.settings import *  # noqa: E402, F403
from leroy.settings import DATABASES, redis_cache  # noqa: E402

LEROY_TEST_DATABASE = "PostgreSQL" if DATABASES["default"]["ENGINE"].endswith("postgresql") else "SQLite"
if LEROY_TEST_DATABASE == "SQLite":
    # A file, as in production (WAL: readers never wait for a writer), not the shared-cache in-memory default,
    # whose table locks would fail threads that read while another thread writes.
    DATABASES["default"]["TEST"] = {"NAME": os.path.join(tempfile.gettempdir(), f"leroy-test-{os.getpid()}.sqlite3")}
if LEROY_TEST_DATABASE == "PostgreSQL":
    # Transactional tests flush with TRUNCATE, which billing's append-only trigger allows only on such connections.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c leroy.ledger_truncate=allowed"
# A parallel checkout may pick its own Redis database with LEROY_TEST_REDIS_URL.
LEROY_TEST_REDIS_URL = os.environ.get("LEROY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15") if _answers(6379) else ""

LEROY_MCP_TOOL_MODULES = ["tests.mcp.tools", "tests.billing.tools"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
LEROY_CORS_ORIGINS = ["https://agent.example"]

# A server process started by a fault test (tests/processes.py) may be given a Redis cache, e.g. one that is down.
if os.environ.get("LEROY_TEST_SERVER_REDIS_URL"):
    CACHES = {"default": redis_cache(os.environ["LEROY_TEST_SERVER_REDIS_URL"])}
