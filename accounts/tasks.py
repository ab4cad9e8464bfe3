"""Celery tasks of accounts."""

from celery import shared_task
from oauth2_provider.models import clear_expired

from accounts import oauth


@shared_task(ignore_result=True)
def oauth_housekeeping_task() -> None:
    """Daily: drop expired OAuth tokens and grants, then registrations that never obtained a token."""
    clear_expired()
    oauth.oauth_clients_collect_garbage()
