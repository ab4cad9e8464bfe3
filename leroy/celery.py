import os
from typing import Any

from celery import Celery, Task
from celery.signals import task_postrun, task_prerun
from kombu.transport import TRANSPORT_ALIASES

from leroy.broker import SCHEME

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")

TRANSPORT_ALIASES[SCHEME] = "leroy.broker:Transport"  # the embedded broker's URL scheme (settings)
app = Celery("leroy")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _release_connections(sender: Task | None = None, **_: Any) -> None:
    """Give each task's database connections back as a web request does (closed when unusable or obsolete: with
    CONN_MAX_AGE 0, always; to the process's pool when there is one). Celery's own handling, which
    CELERY_DB_REUSE_MAX defers, closes a prefork process's whole pool around every task: on PostgreSQL every task
    then opened three new server connections (the pool's minimum and the one it used). Eager tasks run inside
    their caller's request or test transaction, which is not theirs to close."""
    from django.db import close_old_connections

    if sender is not None and not getattr(sender.request, "is_eager", False):
        close_old_connections()
