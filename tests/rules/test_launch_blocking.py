"""launch-blocking: environment, behaviour, thresholds and the real H200 verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.findings import Severity
from nsys_rules.rules.launch_blocking import blocking_share, env_says_blocking
from nsys_rules.testing import TraceBuilder, run_rule, run_rules
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import eager_steps

T0 = 100_000_000
LEVEL = {"info": 0, "warning": 1, "error": 2}




def test_environment_variable_is_an_error(tmp_path):
    b = TraceBuilder(environment={"CUDA_LAUNCH_BLOCKING": "1"})
    eager_steps(b, blocking=True)
    (f,) = run_rule("launch-blocking", b.write(tmp_path / "t.sqlite"))
    assert f.severity == Severity.ERROR and values(f)["blocking_share"] == 100.0
    assert "CUDA_LAUNCH_BLOCKING" in f.recommendation


def test_blocking_behaviour_without_the_variable_is_an_error(tmp_path):
    b = TraceBuilder()
    eager_steps(b, blocking=True)
    (f,) = run_rule("launch-blocking", b.write(tmp_path / "t.sqlite"))
    assert f.severity == Severity.ERROR and values(f)["launches_judged"] == 500


def test_asynchronous_launches_are_quiet(tmp_path):
    b = TraceBuilder(environment={"CUDA_LAUNCH_BLOCKING": "0"})
    eager_steps(b)
    assert run_rule("launch-blocking", b.write(tmp_path / "t.sqlite")) == []


def test_variable_set_but_launches_asynchronous_is_a_warning(tmp_path):
    b = TraceBuilder(environment={"CUDA_LAUNCH_BLOCKING": "1"})
    eager_steps(b)
    (f,) = run_rule("launch-blocking", b.write(tmp_path / "t.sqlite"))
    assert f.severity == Severity.WARNING


def test_blocking_share_prefers_long_kernels():
    # Short kernels end before an asynchronous call returns; long ones decide.
    k_start = np.array([0, 0, 0, 0])
    k_end = np.array([1, 1, 100, 100])
    a_start = np.array([0, 0, 0, 0])
    a_end = np.array([10, 10, 10, 10])
    assert blocking_share(k_start, k_end, a_start, a_end, min_long_kernels=2) == (0.0, 2, True)
    assert blocking_share(k_start, k_end, a_start, a_end, min_long_kernels=3) == (0.5, 4, False)
    assert env_says_blocking({"CUDA_LAUNCH_BLOCKING": "1"}) and not env_says_blocking({"CUDA_LAUNCH_BLOCKING": "0"})


@pytest.mark.parametrize("share,fires", [(0.5, True), (0.51, False)])
def test_blocking_share_threshold(tmp_path, share, fires):
    b = TraceBuilder()
    eager_steps(b, steps=2, per_step=50, blocking=True)  # 100 blocking launches
    later = T0 + 2 * (50 * 10_000 + 50_000)
    for j in range(100):  # and 100 asynchronous ones
        k = later + 10_000 + j * 10_000
        b.kernel("late", start=k, duration=2_000, launch_at=k - 5_000)
    found = run_rule("launch-blocking", b.write(tmp_path / "t.sqlite"), options={"blocking_pct": 100 * share})
    assert bool(found) is fires
    if fires:
        assert values(found[0])["blocking_share"] == 50.0




def test_h200_verdicts_of_launch_rules(h200):
    import json

    expected = json.loads((h200 / "expected.json").read_text())["traces"]
    for name, spec in expected.items():
        result = run_rules(["launch-blocking"], h200 / name)
        worst = {}
        for f in result.findings:
            worst[f.rule] = max(worst.get(f.rule, -1), LEVEL[f.severity.value])
        for rule in ("launch-blocking",):
            if rule in spec["must"]:
                assert worst.get(rule, -1) >= LEVEL[spec["must"][rule]], (name, rule)
            if rule in spec["must_not"]:
                assert worst.get(rule, -1) <= LEVEL["info"], (name, rule)
