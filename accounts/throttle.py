"""Sign-in lockout, and the limit on e-mails a stranger can make Leroy send (sign-up and password-reset links).

Both count per submitted e-mail whether or not an account has it, so neither says which addresses exist, and per
client address. The lockout count starts with the first attempt and lapses LEROY_LOGIN_LOCKOUT_SECONDS later; an
attempt whose password was right is taken back.
"""

import hashlib
import threading
import time

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache, caches
from django.http import HttpRequest

from leroy.cache import FailSoftRedisCache, failed
from leroy.ratelimit import rate_limit_retry_after

HOUR = 3600


def client_address(request: HttpRequest) -> str:
    """The address a request came from, as the counts here key it (the proxy sets REMOTE_ADDR)."""
    return str(request.META.get("REMOTE_ADDR", "unknown"))


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


class _LocalCounts:
    """One process's lockout counts, kept only while the shared cache fails: a sign-in is answered, not a 500, and
    one process still locks out its guesser."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, float]] = {}  # key -> (count, its window's end, time.monotonic())

    def add(self, key: str, by: int, timeout: int) -> int:
        with self._lock:
            at = time.monotonic()
            if len(self._counts) > 10_000:  # lapsed windows: keep memory bounded
                self._counts = {k: v for k, v in self._counts.items() if v[1] > at}
            count, ends = self._counts.get(key, (0, at + timeout))
            if ends <= at:
                count, ends = 0, at + timeout
            self._counts[key] = (max(0, count + by), ends)
            return self._counts[key][0]

    def delete(self, key: str) -> None:
        with self._lock:
            self._counts.pop(key, None)


_local = _LocalCounts()


def _add(key: str, by: int) -> int:
    """Add `by` (1 or -1) to a lockout count whose window starts with its first count; returns the count."""
    timeout = settings.LEROY_LOGIN_LOCKOUT_SECONDS
    backend = caches["default"]
    try:
        if by < 0:
            try:
                return int(backend.decr(key, -by))
            except ValueError:  # lapsed meanwhile: nothing left to take back
                return 0
        if isinstance(backend, FailSoftRedisCache):
            return backend.count(key, timeout)  # one round trip
        backend.add(key, 0, timeout=timeout)
        return int(backend.incr(key, by))
    except Exception as error:  # the shared cache failed: this process keeps the count meanwhile
        failed("login lockout count", error)
        return _local.add(key, by, timeout)


def login_attempt(*, email: str, address: str) -> bool:
    """Count a sign-in attempt (or a form's check of the current password) before its password is checked; False,
    counting nothing, once the account or the client address has used its attempts. Counted first, so guesses sent
    together cannot all pass a check made before any of them failed (found from outside: 11 simultaneous wrong
    passwords were all checked against a limit of five). A right password takes its attempt back (login_succeeded)."""
    account_key, address_key = _keys(email, address)
    account, client = _add(account_key, 1), _add(address_key, 1)
    if account > settings.LEROY_LOGIN_FAILURES_PER_ACCOUNT or client > settings.LEROY_LOGIN_FAILURES_PER_ADDRESS:
        _add(account_key, -1)
        _add(address_key, -1)
        return False
    return True


def login_succeeded(*, email: str, address: str) -> None:
    """The attempt's password was right: the account's count ends, and the attempt is no failure of its client's."""
    login_count_clear(email=email)
    _add(_keys(email, address)[1], -1)


def login_count_clear(*, email: str) -> None:
    """End the account's count (a new password from a reset link; the client addresses' counts stay)."""
    key = _keys(email, "")[0]
    cache.delete(key)  # fail-soft: a failed delete is logged and skipped
    _local.delete(key)
