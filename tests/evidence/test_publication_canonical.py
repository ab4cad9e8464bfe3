"""`canonical` writes exactly the bytes of `rfc8785.dumps` (every receipt and leaf hash is taken over them) and
raises its errors."""

import math

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence.publication.services import canonical

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(JSON)
def test_canonical_bytes_equal_rfc8785_for_any_json(value):
    assert canonical(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        0.0,
        -0.0,
        2.0,
        1e-5,
        1e-7,
        0.0001,
        1e15,
        1e16,
        1e21,
        float(2**53),
        float(-(2**53)),
        float(2**53 - 1),
        5e-324,
        1.7976931348623157e308,
        1 / 3,
        {"b": 1, "a": [1, 2.0, 'x\u2028\x7f\x00\x1f\b"\\']},
        {"\ue000": 1, "\U0001f600": 2, "é": 3},  # UTF-16 order differs from code point order here
        (1, [2.5, None]),
        {"overage_amount_usd": 0.0, "win_rate": 0.5123, "lift_vs_baseline_bps": -12.34},
    ],
)
def test_canonical_bytes_equal_rfc8785_at_the_edges(value):
    assert canonical(value) == rfc8785.dumps(value)


def test_canonical_sorts_keys_by_utf16_units_as_jcs_requires():
    assert canonical({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'.encode()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (math.nan, rfc8785.FloatDomainError),
        (math.inf, rfc8785.FloatDomainError),
        (2**53, rfc8785.IntegerDomainError),
        ({1: "a"}, rfc8785.CanonicalizationError),
        ("\ud800", rfc8785.CanonicalizationError),
        (object(), rfc8785.CanonicalizationError),
    ],
)
def test_canonical_refuses_what_rfc8785_refuses(value, error):
    with pytest.raises(error):
        canonical(value)
