from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import override_settings

from leroy import clock


def test_real_clock_is_aware_utc():
    with time_machine.travel(datetime(2026, 8, 3, 14, 0, tzinfo=UTC), tick=False):
        assert clock.now() == datetime(2026, 8, 3, 14, 0, tzinfo=UTC)


def test_replay_clock_starts_at_its_origin_and_advances_in_real_time():
    started = clock._started_at
    with (
        override_settings(LEROY_CLOCK="replay:2026-07-01T14:30:00Z"),
        time_machine.travel(started + timedelta(seconds=90), tick=False),
    ):
        assert clock.now() == datetime(2026, 7, 1, 14, 31, 30, tzinfo=UTC)


@pytest.mark.parametrize("value", ["replay:", "freeze:2026-07-01T14:30:00Z", "replay:2026-07-01T14:30:00"])
def test_malformed_replay_values_are_refused(value):
    with pytest.raises(ValueError):
        clock.parse_replay_origin(value)
