"""The loader's repairs of damaged exports (nsys_rules/loaders/damage.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsys_rules.loaders import damage


def test_to_int_keeps_exact_integers_and_refuses_the_rest():
    raw = np.array([5, 2**62 + 1, "17", "x", None, b"\x00", 1.5, float("inf"), 1e30, -1e30], dtype=object)
    out = damage.to_int(raw, -1)
    assert out.dtype == np.int64
    assert out[0] == 5 and out[2] == 17 and out[6] == 1
    assert list(out[3:6]) == [-1, -1, -1] and list(out[7:]) == [-1, -1, -1]
    floats = np.array([3.0, np.nan, 9.3e18])
    assert damage.to_int(floats, -1).tolist() == [3, -1, -1]


def test_to_int_refuses_booleans():
    """True is no time and no id: a boolean column (or one boolean among objects) reads as unknown, not 1."""
    assert damage.to_int(np.array([True, False, True]), -1).tolist() == [-1, -1, -1]
    mixed = np.array([True, 5, np.bool_(False), "7", None], dtype=object)
    assert damage.to_int(mixed, -1).tolist() == [-1, 5, -1, 7, -1]
    assert damage.unreadable_count(mixed, damage.to_int(mixed, -1), -1) == 2


def test_unreadable_count_ignores_nulls():
    raw = np.array([1, None, "x", b"\x01"], dtype=object)
    assert damage.unreadable_count(raw, damage.to_int(raw, -1), -1) == 2
    assert damage.unreadable_count(np.array([1, 2]), np.array([1, 2]), -1) == 0


def _frame(rows):
    return pd.DataFrame(rows, columns=["start", "end", "correlation_id", "stream_id"])


def test_exact_repeats_dropped_once_with_a_note():
    notes: list[str] = []
    frame = _frame([(10, 20, 1, 7), (10, 20, 1, 7), (10, 20, 2, 7), (30, 40, 3, 7), (10, 20, 1, 7)])
    out = damage.drop_duplicate_rows("kernels", frame, notes)
    assert out[["start", "correlation_id"]].values.tolist() == [[10, 1], [10, 2], [30, 3]]
    assert notes == ["kernels: 2 duplicate row(s) dropped (same correlationId, start and end)"]
    damage.drop_duplicate_rows("kernels", frame, notes)
    assert len(notes) == 1  # the same note is not repeated


def test_same_times_on_other_streams_are_not_repeats():
    notes: list[str] = []
    frame = _frame([(10, 20, 1, 7), (10, 20, 1, 13)])
    assert len(damage.drop_duplicate_rows("kernels", frame, notes)) == 2 and not notes


def test_no_dedup_without_a_correlation_id_or_outside_identity_tables():
    notes: list[str] = []
    frame = pd.DataFrame({"start": [1, 1], "end": [2, 2]})
    assert len(damage.drop_duplicate_rows("kernels", frame, notes)) == 2
    assert len(damage.drop_duplicate_rows("nvtx", _frame([(1, 2, 3, 4)] * 2), notes)) == 2
    assert not notes


def test_invalid_required_and_impossible_times():
    notes: list[str] = []
    frame = pd.DataFrame({"start": [0, -1, 5, 2**60], "end": [1, 3, 2**62, 2**60 + 1]})
    out = damage.drop_invalid_required("api", frame, ["start", "end"], -1, notes)
    assert out["start"].tolist() == [0]
    assert notes == ["api: 1 row(s) with a non-numeric start/end dropped",
                     "api: 2 row(s) with an impossible timestamp (beyond 2^53 ns) dropped"]
