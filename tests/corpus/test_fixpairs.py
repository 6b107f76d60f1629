"""Before/after pairs of one program with and without one habit (issue 36): the finding that names the habit
predicts the measured change of the median step within 0.8-1.25x.

The pairs sit in ``tests/data/fixpairs/`` as ``NAME.sqlite.xz`` beside ``truth.json`` (captured by
``capture.sh`` there from ``fixpairs_scenarios.txt``; the truth is the measured median-step change, from
SQL). :data:`PAIRS` names which capture is the "before" of which "after" and the rule(s) whose fix the
pair is; a pair whose captures are absent skips with the reason. Each capture is unpacked once per
session into a temporary folder.
"""

from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path
from typing import Any

import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.model.budget import step_budget
from nsys_rules.model.replay_what_if import EDITS, step_replay
from nsys_rules.model.steps import step_model

FOLDER = Path(__file__).resolve().parents[1] / "data" / "fixpairs"

#: before, after, the rules whose fix turns one into the other.
PAIRS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("fx_decode_eager", "fx_decode_graphs", ("launch-bound",)),
    ("fx_resnet_pageable", "fx_resnet_pinned", ("pageable-memcpy",)),
    ("fx_resnet_pinned_item", "fx_resnet_pinned", ("sync-stall",)),
    ("fx_resnet_pageable_item", "fx_resnet_pinned", ("pageable-memcpy", "sync-stall")),
    ("fx_resnet_fp32", "fx_resnet_pinned", ("fp32-gemm",)),
    ("fx_llama_loader20", "fx_llama_base", ("input-prep",)),
    ("fx_llama_empty_cache", "fx_llama_base", ("alloc-churn",)),
    ("fx_alloc_nocache", "fx_alloc_cached", ("alloc-churn",)),
    ("fx_jax_readback", "fx_jax_noreadback", ("sync-stall",)),
    ("fx_llama_base", "fx_llama_compile", ("fusion-candidate",)),
)


def _truth() -> dict[str, Any]:
    path = FOLDER / "truth.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def measured_change(truth: dict[str, Any], before: str, after: str) -> int | None:
    """The truth's measured median-step change from ``before`` to ``after`` (ns), when it records it.

    ``fixpairs_truth.py`` writes ``{"pairs": {PAIR: {"before", "after", "change_ns", "interval_ns", ...}}}``
    with ``change_ns`` = median after - median before (negative: saved); returned as the time saved.
    Also accepted: per-capture medians (``{name: {"median_ns": ...}}``, or a ``captures`` list of such
    entries with ``name``).
    """
    pairs = truth.get("pairs")
    listed = pairs.values() if isinstance(pairs, dict) else pairs if isinstance(pairs, list) else []
    for pair in listed:
        if isinstance(pair, dict) and pair.get("before") == before and pair.get("after") == after:
            if "change_ns" in pair:
                return -int(pair["change_ns"])
            if "median_before_ns" in pair and "median_after_ns" in pair:
                return int(pair["median_before_ns"]) - int(pair["median_after_ns"])
    medians: dict[str, int] = {}
    entries = truth.get("captures", truth)
    items = entries if isinstance(entries, list) else [dict(v, name=k) for k, v in entries.items()
                                                       if isinstance(v, dict)]
    for item in items:
        for key in ("median_step_ns", "median_ns", "step_ns_p50"):
            if key in item and "name" in item:
                medians[str(item["name"])] = int(item[key])
    if before in medians and after in medians:
        return medians[before] - medians[after]
    return None


@pytest.fixture(scope="session")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the pairs' captures are unpacked into, on demand."""
    return tmp_path_factory.mktemp("fixpairs")


def _capture(folder: Path, name: str) -> Path:
    packed = FOLDER / f"{name}.sqlite.xz"
    if not packed.is_file():
        pytest.skip(f"{packed} is absent (the fix pairs are captured on a GPU machine: capture.sh in that folder)")
    out = folder / f"{name}.sqlite"
    if not out.is_file():
        with lzma.open(packed) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def _median(path: Path) -> int:
    trace = open_trace(path)
    model = step_model(trace)
    budget = step_budget(trace, model)
    assert budget is not None, f"{path.name}: no steps ({model.reason})"
    return int(budget.step_ns[budget.median_step])


@pytest.mark.parametrize(("before", "after", "rules"), PAIRS, ids=[f"{b}->{a}" for b, a, _ in PAIRS])
def test_the_finding_predicts_the_measured_change(unpacked: Path, before: str, after: str,
                                                  rules: tuple[str, ...]) -> None:
    missing = [r for r in rules if r not in EDITS]
    if missing:
        pytest.skip(f"{before} -> {after}: no replay edit for {', '.join(missing)} yet (torch.compile's fusion)")
    first, second = _capture(unpacked, before), _capture(unpacked, after)
    measured = measured_change(_truth(), before, after)
    if measured is None:  # the truth file does not record this pair: our own median steps are the truth
        measured = _median(first) - _median(second)
    trace = open_trace(first)
    model = step_model(trace)
    replayed = step_replay(trace, model, step_budget(trace, model))
    assert replayed is not None
    predicted = replayed.together(rules) if len(rules) > 1 else replayed.saving(rules[0]).per_step_ns
    assert measured > 0, f"{before} -> {after}: the median step did not shrink ({measured} ns)"
    assert 0.8 <= predicted / measured <= 1.25, f"{before} -> {after}: predicted {predicted} ns, measured {measured} ns"
