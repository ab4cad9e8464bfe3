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


def test_an_anchored_replay_clock_reads_the_same_time_in_processes_started_apart(monkeypatch):
    # Each process's replay clock started when it did: a worker started 4 s after the web process recorded a
    # backtest starting 4 s before the web process created it (found from outside).
    value = clock.anchored("replay:2026-07-01T14:30:00Z", datetime(2026, 12, 7, 18, 0, tzinfo=UTC))
    read = []
    for started in (datetime(2026, 12, 7, 18, 0, 1, tzinfo=UTC), datetime(2026, 12, 7, 18, 0, 5, tzinfo=UTC)):
        monkeypatch.setattr(clock, "_started_at", started)
        with override_settings(LEROY_CLOCK=value), time_machine.travel(datetime(2026, 12, 7, 18, 1, tzinfo=UTC)):
            read.append(clock.now())

    assert value == "replay:2026-07-01T14:30:00+00:00@2026-12-07T18:00:00+00:00"
    assert read == [datetime(2026, 7, 1, 14, 31, tzinfo=UTC)] * 2
    assert clock.anchored(value, datetime(2027, 1, 1, tzinfo=UTC)) == value  # anchored once, kept
    assert clock.anchored("", datetime(2027, 1, 1, tzinfo=UTC)) == ""  # the real clock stays real


@pytest.mark.parametrize(
    "value",
    ["replay:", "freeze:2026-07-01T14:30:00Z", "replay:2026-07-01T14:30:00", "replay:2026-07-01T14:30:00Z@",
     "replay:2026-07-01T14:30:00Z@2026-12-07T18:00:00", "replay:2026-07-01T14:30:00Z@soon"],
)  # fmt: skip
def test_malformed_replay_values_are_refused(value):
    with pytest.raises(ValueError):
        clock.parse_replay(value)
