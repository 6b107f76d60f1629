"""The fix pairs' truth (tests/data/fixpairs/truth.json, issue 36) recomputed from SQL over the kept traces.

truth.json holds, per before/after pair, the median step of each side and the measured change with its
bootstrap interval, all from our own SQL (fixpairs_truth.py). These tests unpack the traces and compute them
again, so the truth cannot drift from the captures (or the captures be swapped) without a failing test.
Skipped where the .sqlite.xz files are missing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "data" / "fixpairs"
TRUTH = json.loads((HERE / "truth.json").read_text())["pairs"] if (HERE / "truth.json").exists() else {}


def _module():
    spec = importlib.util.spec_from_file_location("fixpairs_truth", HERE / "fixpairs_truth.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FT = _module()
NAMES = sorted({t[side] for t in TRUTH.values() for side in ("before", "after")})


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, dict]:
    missing = [n for n in NAMES if not (HERE / f"{n}.sqlite.xz").exists()]
    if missing:
        pytest.skip(f"fix-pair traces missing: {', '.join(missing)}")
    return FT.measure(HERE, tmp_path_factory.mktemp("fixpairs"))


@pytest.mark.skipif(not TRUTH, reason="no truth.json yet: the fix pairs have not been captured")
def test_every_pair_is_measured_and_named():
    assert len(TRUTH) >= 8, sorted(TRUTH)
    areas = {t["area"] for t in TRUTH.values()}
    for needed in ("launch overhead", "syncs", "host input", "allocation", "copies", "FP32"):
        assert needed in areas, areas
    for name, t in TRUTH.items():
        assert t["before"] in FT.STEPS and t["after"] in FT.STEPS, name
        assert t["change_ns"] == t["median_after_ns"] - t["median_before_ns"], name
        lo, hi = t["interval_ns"]
        assert lo <= t["change_ns"] <= hi, (name, t["change_ns"], lo, hi)


@pytest.mark.parametrize("pair", sorted(TRUTH))
def test_the_medians_are_what_sql_gives(measured, pair):
    t = TRUTH[pair]
    before, after = measured[t["before"]], measured[t["after"]]
    assert before["median_ns"] == t["median_before_ns"], (pair, before["median_ns"])
    assert after["median_ns"] == t["median_after_ns"], (pair, after["median_ns"])
    assert (before["steps"], after["steps"]) == (t["steps_before"], t["steps_after"]), pair


@pytest.mark.parametrize("pair", sorted(TRUTH))
def test_the_interval_is_the_bootstrap_of_those_steps(measured, pair):
    t = TRUTH[pair]
    lo, hi = FT.bootstrap_change(measured[t["before"]]["periods"], measured[t["after"]]["periods"])
    # Same seed and resample count: the same interval, up to a numpy generator change (1 % of the change's size).
    slack = max(abs(t["change_ns"]) // 100, 1000)
    assert abs(lo - t["interval_ns"][0]) <= slack and abs(hi - t["interval_ns"][1]) <= slack, (pair, lo, hi)
