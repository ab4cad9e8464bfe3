"""A pooled PostgreSQL connection that the server dropped while it sat in the pool (a restart, a failover) is
replaced as it leaves the pool: the next request or task gets a working connection, not the error. Tried on a pool of
one connection built with the settings' pool options, so that no other test's connections are touched."""

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from psycopg_pool import ConnectionPool

pytestmark = pytest.mark.skipif(
    settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="the connection pool is PostgreSQL's"
)


def test_a_connection_the_server_dropped_in_the_pool_is_replaced_not_handed_out() -> None:
    db = connection.settings_dict
    conninfo = psycopg.conninfo.make_conninfo(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres")
    options = {**settings.DATABASES["default"]["OPTIONS"]["pool"], "min_size": 1, "max_size": 1}

    with ConnectionPool(conninfo, open=True, **options) as pool:
        with pool.connection() as held:  # a request or task, then its connection goes back
            dropped = held.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (dropped,))
        with pool.connection() as next_one:  # the next request or task
            replaced = next_one.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]

    assert replaced != dropped
