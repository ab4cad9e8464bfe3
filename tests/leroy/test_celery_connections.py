"""A worker task's database connections go back as a web request's do, and a prefork process keeps its pool: Celery's
Django fixup closed the whole pool around every task, so on PostgreSQL every task opened new server connections."""

from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun
from django.conf import settings
from django.db import connection

from accounts.models import User
from leroy.celery import app

POOLED = bool(settings.DATABASES["default"].get("OPTIONS", {}).get("pool"))


class Task:
    """What the handlers read of a task: its request (a signal's sender must be hashable)."""

    def __init__(self, *, eager: bool) -> None:
        self.request = SimpleNamespace(is_eager=eager)


def prefork_fixup() -> DjangoWorkerFixup:
    """Celery's fixup as a prefork worker installs it (what it does around each task)."""
    fixup = DjangoWorkerFixup(app)
    fixup.worker = SimpleNamespace(pool_cls="celery.concurrency.prefork:TaskPool")
    return fixup


@pytest.mark.django_db(transaction=True)
def test_a_worker_tasks_connection_goes_back_and_its_process_keeps_the_pool() -> None:
    fixup = prefork_fixup()
    for _ in range(3):  # three tasks in one process
        fixup.on_task_prerun(sender=Task(eager=False))
        task_prerun.send(sender=Task(eager=False))
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        pool = connection.pool if POOLED else None
        task_postrun.send(sender=Task(eager=False))
        fixup.on_task_postrun(sender=Task(eager=False))

        assert connection.connection is None  # handed back: to the pool on PostgreSQL, closed on SQLite
        if POOLED:
            assert connection.pool is pool
            assert pool is not None and not pool.closed


@pytest.mark.django_db
def test_an_eager_tasks_end_leaves_its_callers_transaction_alone() -> None:
    User.objects.create_user(email="eager@example.com", password="a long enough password")
    held = connection.connection

    task_postrun.send(sender=Task(eager=True))

    assert connection.connection is held
    assert User.objects.filter(email="eager@example.com").count() == 1
