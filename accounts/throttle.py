"""Sign-in lockout, and the limit on e-mails a stranger can make Leroy send (sign-up and password-reset links).

Both count per submitted e-mail whether or not an account has it, so neither says which addresses exist, and per
client address. The lockout count starts with the first failure and lapses LEROY_LOGIN_LOCKOUT_SECONDS later.
"""

import hashlib

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache

from leroy.ratelimit import rate_limit_retry_after

HOUR = 3600


def email_send_retry_after(*, email: str, address: str) -> int | None:
    """Seconds to wait before Leroy e-mails `email` again at the request of `address`; None when it may now.
    Both counts advance on every request, so a flood from one client or at one inbox stops at its limit."""
    digest = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]
    waits = [
        async_to_sync(rate_limit_retry_after)(f"email-to:{digest}", settings.LEROY_EMAILS_PER_ADDRESS_PER_HOUR, HOUR),
        async_to_sync(rate_limit_retry_after)(f"email-by:{address}", settings.LEROY_EMAILS_PER_CLIENT_PER_HOUR, HOUR),
    ]
    refused = [wait for wait in waits if wait is not None]
    return max(refused) if refused else None


def _keys(email: str, address: str) -> tuple[str, str]:
    digest = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]
    return f"leroy:login-failures:account:{digest}", f"leroy:login-failures:address:{address}"


def login_locked(*, email: str, address: str) -> bool:
    account_key, address_key = _keys(email, address)
    counts = cache.get_many([account_key, address_key])
    return (
        counts.get(account_key, 0) >= settings.LEROY_LOGIN_FAILURES_PER_ACCOUNT
        or counts.get(address_key, 0) >= settings.LEROY_LOGIN_FAILURES_PER_ADDRESS
    )


def login_failed(*, email: str, address: str) -> None:
    for key in _keys(email, address):
        cache.add(key, 0, timeout=settings.LEROY_LOGIN_LOCKOUT_SECONDS)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr: this failure starts a new count
            cache.add(key, 1, timeout=settings.LEROY_LOGIN_LOCKOUT_SECONDS)


def login_succeeded(*, email: str, address: str) -> None:
    cache.delete(_keys(email, address)[0])
