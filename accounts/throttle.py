"""Sign-in lockout: failed passwords counted per submitted address and per client address in the shared cache.

Counted per submitted e-mail whether or not an account has it, so the lockout says nothing about which
addresses exist. The count starts with the first failure and lapses LEROY_LOGIN_LOCKOUT_SECONDS later.
"""

import hashlib

from django.conf import settings
from django.core.cache import cache


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
