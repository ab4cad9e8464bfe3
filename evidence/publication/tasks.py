"""The daily commitment of answer hashes, run by beat after the close."""

from celery import shared_task

from evidence.publication import services
from leroy.clock import now


@shared_task(name="evidence.answers_commit")
def answers_commit_task() -> int:
    return len(services.answers_commit_due(through=now().date()))
