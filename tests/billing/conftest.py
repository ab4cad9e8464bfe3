"""Setup the billing tests share: a clock standing still mid-month and a lookup charge committed as a tool does."""

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import transaction

from accounts.models import User
from billing import services

MID_AUGUST = datetime(2026, 8, 18, 14, 30, tzinfo=UTC)

Charge = Callable[..., services.LookupCharge]


@pytest.fixture
def mid_august() -> Iterator[None]:
    """Mid-month and frozen, so no test crosses a month boundary by accident."""
    with time_machine.travel(MID_AUGUST, tick=False):
        yield


@pytest.fixture
def charge() -> Charge:
    """charge(user, units=, tool=, fingerprint=, key=, cache_hit=): one lookup charge in its own transaction,
    the way a metered tool commits it (key is the client_request_id)."""

    def charge(
        user: User,
        *,
        units: int = 1,
        tool: str = "evaluate_current_setup",
        fingerprint: str = "fp",
        key: str | None = None,
        cache_hit: bool = False,
    ) -> services.LookupCharge:
        with transaction.atomic():
            return services.lookup_charge(
                user=user,
                tool=tool,
                units=units,
                request_fingerprint=fingerprint,
                client_request_id=key,
                cache_hit=cache_hit,
            )

    return charge
