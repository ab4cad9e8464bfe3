"""Celery tasks of accounts."""

import smtplib

from celery import shared_task
from django.core.mail import EmailMessage
from oauth2_provider.models import clear_expired

from accounts import oauth


@shared_task(ignore_result=True)
def oauth_housekeeping_task() -> None:
    """Daily: drop expired OAuth tokens and grants, then registrations that never obtained a token."""
    clear_expired()
    oauth.oauth_clients_collect_garbage()


@shared_task(
    name="accounts.mail_send",
    ignore_result=True,
    autoretry_for=(smtplib.SMTPException, OSError),  # the mail server refused or did not answer: try again later
    retry_backoff=30,
    max_retries=5,
)
def mail_send_task(subject: str, body: str, to: list[str]) -> None:
    """Send one account e-mail (a sign-up or password-reset link), as the request that asked for it rendered it."""
    EmailMessage(subject, body, None, to).send()
