"""Numbers as people read and write them: percentages, durations, sizes. No judgement, no trace."""

from __future__ import annotations

import math
import re

from nsys_rules.errors import UsageError
from nsys_rules.textsafe import clip_value


def pct(part: float, whole: float) -> float:
    """Percent, 0 when ``whole`` is 0."""
    return 100.0 * part / whole if whole else 0.0


def plain_number(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, never in exponent notation.

    ``0.000000001``, ``1.5``, ``71``, ``1000`` (a number of more integer digits keeps them all):
    what ``:.3g`` writes, except where ``:g`` would write ``1e+03`` or ``1e-09``. Trailing zeros go,
    as with ``:g``; infinities and NaN are written as Python writes them.
    """
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    text = f"{value:.{max(0, digits - 1 - exponent)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


#: The units of :func:`human_ns`, largest first.
_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3))


def human_ns(ns: float | int | None, signed: bool = False) -> str:
    """``1234567`` -> ``1.23 ms`` (three significant digits, the largest unit that fits); ``""`` for None.

    Never in exponent notation: 999.96 ms is ``1 s`` (the rounding carried into the next unit), 10**12
    ns is ``1000 s``. ``signed``: a change, with its sign (``+1.23 ms``, ``-4 us``, ``0 ns``).
    """
    if ns is None:
        return ""
    ns = float(ns)
    sign = "-" if ns < 0 else "+" if signed and ns > 0 else ""
    size = abs(ns)
    if not math.isfinite(size):
        return f"{sign}{size} ns"
    for unit, scale in _TIME_UNITS:
        # The unit whose value, rounded as shown, is at least 1.
        text = plain_number(size / scale)
        if float(text) >= 1:
            return f"{sign}{text} {unit}"
    return f"{sign}{size:.0f} ns"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 time``, ``2 times``, ``0 copies`` (``plural`` when adding "s" is not the plural)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


#: The units of :func:`human_bytes`, largest first (binary, as the GPU tools count memory).
_BYTE_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human_bytes(size: float | int) -> str:
    """``1073741824`` -> ``1.00 GiB``, ``4096`` -> ``4.00 KiB``, ``12`` -> ``12 B``: the largest unit in which the
    value is at least 1, three significant digits (never ``0.00 GiB`` for a small copy)."""
    size = float(size)
    for unit, scale in _BYTE_UNITS:
        value = abs(size) / scale
        if round(value, 2) >= 1:
            digits = 2 if value < 9.995 else 1 if value < 99.95 else 0
            return f"{size / scale:.{digits}f} {unit}"
    return f"{size:.0f} B"


_SIZE = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3,
         "t": 1024**4, "tb": 1024**4}


#: A number as people type it: ASCII digits, one optional sign, decimals and exponent. Python's ``int()``
#: and ``float()`` also take other scripts' digits ('١٢'), full-width ones and ``1_000``: a value that
#: reads differently on screen than what the run uses, so each is refused (and '²' made them fail late).
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.ASCII | re.IGNORECASE)
_PLAIN_INT = re.compile(r"[+-]?\d+", re.ASCII)


def plain_float(text: str) -> float:
    """``float(text)`` for a number written in ASCII (``2.5``, ``-1e3``, ``nan``); ``ValueError`` for anything
    else, other scripts' digits and ``1_000`` included. Surrounding spaces are allowed."""
    stripped = str(text).strip()
    if not _PLAIN_NUMBER.fullmatch(stripped):
        raise ValueError(f"not a plain number: {clip_value(text, 40)!r}")
    return float(stripped)


def whole_number(text: str) -> int:
    """``int(text)`` for ASCII digits with an optional sign; ``ValueError`` otherwise (``'١'``, ``'²'``, ``1_0``)."""
    stripped = str(text).strip()
    if not _PLAIN_INT.fullmatch(stripped):
        raise ValueError(f"not a whole number: {clip_value(text, 40)!r}")
    return int(stripped)


def parse_size(text: str) -> int:
    """``512MB``, ``2G``, ``1048576`` -> bytes; at least one byte, finite, at most 2**62."""
    raw = str(text).strip().lower().replace("ib", "b")
    num = raw.rstrip("kmgtb")
    unit = raw[len(num):]
    try:
        value = plain_float(num) * _SIZE[unit]
    except (ValueError, KeyError):
        value = math.nan
    if not math.isfinite(value) or value < 1 or value > 2**62:
        raise UsageError(f"bad size {clip_value(text, 40)!r}: use a number of bytes with K, M, G or T (e.g. 2G)")
    return int(value)
