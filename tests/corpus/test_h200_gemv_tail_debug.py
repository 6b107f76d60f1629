"""expected.json verdicts of gemv-dominance, kernel-tail and debug-build on the 17 H200 traces.

One run of the three rules per trace (parametrized, so a failure names the trace): every 'must'
of these rules reported at or above its severity, every 'must_not' at most info, and every
finding carries a recommendation and its key numbers.
"""

from __future__ import annotations

import json

import pytest

from nsys_rules.testing import run_rules
from tests.conftest import H200

RULES = ("gemv-dominance", "kernel-tail", "debug-build")
LEVEL = {"info": 0, "warning": 1, "error": 2}


def _traces() -> list:
    if not (H200 / "expected.json").exists():
        return [pytest.param(None, {}, marks=pytest.mark.skip(reason=f"{H200} is absent (no shared traces beside "
                                                                      "the checkout)"))]
    spec = json.loads((H200 / "expected.json").read_text())["traces"]
    return [pytest.param(name, exp, id=name) for name, exp in spec.items()]


@pytest.mark.parametrize("name,spec", _traces())
def test_verdicts(name, spec):
    result = run_rules(list(RULES), H200 / name)
    assert result.errors == []
    worst: dict[str, int] = {}
    for f in result.findings:
        worst[f.rule] = max(worst.get(f.rule, -1), LEVEL[f.severity.value])
        assert f.recommendation.strip() and f.metrics, (name, f.rule)
    for rule, floor in spec.get("must", {}).items():
        if rule in RULES:
            assert worst.get(rule, -1) >= LEVEL[floor], f"{name}: {rule} must reach {floor}"
    for rule in spec.get("must_not", []):
        if rule in RULES:
            assert worst.get(rule, -1) <= LEVEL["info"], f"{name}: {rule} must stay at most info"
