"""A pooled PostgreSQL connection that the server dropped while it sat in the pool (a restart, a failover) is
replaced as it leaves the pool: the next request or task gets a working connection, not the error."""

import psycopg
import pytest
from django.conf import settings
from django.db import close_old_connections, connection

pytestmark = pytest.mark.skipif(
    settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="the connection pool is PostgreSQL's"
)


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_connections_the_server_dropped_in_the_pool_are_replaced_not_handed_out() -> None:
    backend_pid()
    close_old_connections()  # the request or task ends: its connection goes back to the pool
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True) as a:
        dropped = [
            pid
            for (pid,) in a.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (db["NAME"],)
            ).fetchall()
        ]
        for pid in dropped:
            a.execute("SELECT pg_terminate_backend(%s)", (pid,))

    after = []
    for _ in range(3):  # the next requests or tasks
        after.append(backend_pid())
        close_old_connections()

    assert len(dropped) >= 2  # the pool's minimum, idle
    assert set(after).isdisjoint(dropped)
