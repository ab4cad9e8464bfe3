import math
import struct
from datetime import date

import pytest

from backtests import series


def test_a_series_packs_as_int32_day_ordinals_then_float64_returns():
    packed = series.pack([["2024-01-02", 0.5], ["2024-01-03", -0.25]])

    ordinals = (date(2024, 1, 2).toordinal(), date(2024, 1, 3).toordinal())
    assert packed == struct.pack("<2i2d", *ordinals, 0.5, -0.25)
    assert series.pack([]) == b""


def test_unpacking_gives_the_series_back_bit_for_bit():
    values = [0.1, -0.0, 5e-324, 1.7976931348623157e308, -1e-17, math.inf, 2 / 3]
    days = ["0001-01-01", "1999-12-31", "2000-02-29", "2016-01-04", "2024-12-31", "9999-12-30", "9999-12-31"]
    original = [[day, value] for day, value in zip(days, values, strict=True)]

    unpacked = series.unpack(memoryview(series.pack(original)))  # PostgreSQL's bytea comes back as a memoryview

    assert unpacked == original
    assert [struct.pack("<d", v) for _, v in unpacked] == [struct.pack("<d", v) for v in values]  # -0.0 kept
    assert series.unpack(b"") == []


def test_a_nan_return_and_an_int_return_are_kept_as_floats():
    unpacked = series.unpack(series.pack([["2024-01-02", math.nan], ["2024-01-03", 0]]))

    assert unpacked[0][0] == "2024-01-02" and math.isnan(unpacked[0][1])
    assert unpacked[1] == ["2024-01-03", 0.0] and type(unpacked[1][1]) is float


@pytest.mark.parametrize(
    "malformed",
    [
        [["20240102", 0.1]],  # compact ISO: it would come back as 2024-01-02
        [["2024-01-02T00:00", 0.1]],
        [["2024-01", 0.1]],
        [["NaT", 0.1]],
        [["10000-01-01", 0.1]],
        [["2024-02-30", 0.1]],
        [[date(2024, 1, 2), 0.1]],
        [[20240102, 0.1]],
        [[None, 0.1]],
        [["2024-01-02", True]],
        [["2024-01-02", "0.1"]],
        [["2024-01-02", None]],
        [["2024-01-02", 10**400]],
        [["2024-01-02"]],
        [None],
    ],
)
def test_anything_but_iso_days_and_numbers_is_refused(malformed):
    with pytest.raises(ValueError, match="not a daily return series"):
        series.pack(malformed)


def test_bytes_that_are_not_whole_days_are_refused():
    with pytest.raises(ValueError, match="a multiple of 12 bytes, not 13"):
        series.unpack(series.pack([["2024-01-02", 0.1]]) + b"x")
