"""Numbers never in exponent notation in human output: ``saves 1e+03 ms`` must read ``saves 1 s``."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from nsys_rules.findings import Metric
from nsys_rules.formatters.html import _bytes, _metric_text
from nsys_rules.units import human_ns, plain_number

EXPONENT = re.compile(r"\d[eE][-+]?\d")
#: Values from 1e-9 to 1e12, spread over every decade (the edges of each unit and each rounding carry).
VALUES = st.one_of(st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False),
                   st.builds(lambda d, m: m * 10.0 ** d, st.integers(-9, 12), st.sampled_from([1, 0.9995, 9.995, 99.95,
                                                                                               999.5, 999.96])))


def test_the_carry_moves_to_the_next_unit():
    assert human_ns(999_950_000) == "1 s"  # was "1e+03 ms"
    assert human_ns(999.6) == "1 us" and human_ns(999.4) == "999 ns"
    assert human_ns(1e12) == "1000 s" and human_ns(1.5e12) == "1500 s"
    assert human_ns(70_986_978) == "71 ms" and human_ns(4_580_000) == "4.58 ms"  # as :.3g wrote them
    assert human_ns(-999_960, signed=True) == "-1 ms" and human_ns(1e-9, signed=True) == "+0 ns"
    assert plain_number(1e-9) == "0.000000001" and plain_number(1e12) == "1000000000000"
    assert plain_number(0.0001234, 2) == "0.00012" and plain_number(0) == "0"


@settings(max_examples=300, deadline=None)
@given(VALUES, st.booleans())
def test_no_exponent_in_durations(value, negative):
    ns = -value if negative else value
    text = human_ns(ns, signed=True)
    assert not EXPONENT.search(text), (ns, text)
    number, unit = text.split(" ")
    shown = abs(float(number))
    scale = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1}[unit]
    # The shown value is the duration to three significant digits (whole ns at most), in the largest unit
    # where it is at least 1, and below 1000 except in seconds.
    assert shown >= 1 or (unit == "ns" and shown == round(value))
    assert shown < 1000 or unit == "s"
    assert math.isclose(shown * scale, value, rel_tol=5e-3, abs_tol=0.5)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(1, 6))
def test_plain_numbers_round_like_g_without_its_exponent(value, digits):
    text = plain_number(value, digits)
    assert not EXPONENT.search(text) and "e" not in text
    if value >= 10 ** (digits - 1):
        assert text == f"{value:.0f}"  # whole numbers keep every integer digit (1234, not 1.23e+03)
    else:
        assert float(text) == float(f"{value:.{digits}g}")  # the number :g writes, spelled out


@settings(max_examples=200, deadline=None)
@given(VALUES)
def test_html_metrics_never_in_exponent_notation(value):
    for unit in ("ratio", "%", "count", "B", "B/s", "ns"):
        text = _metric_text(Metric(value, unit))
        assert not EXPONENT.search(text), (value, unit, text)
    assert not EXPONENT.search(_bytes(value))
