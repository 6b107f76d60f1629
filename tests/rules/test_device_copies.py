"""device-copies: device-to-device copies that are a real share of every step."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import foreign_words, program

T0 = 100_000_000
STEP = 1_000_000


def token_loop(b: TraceBuilder, *, copy_ns: int, steps: int = 12, copies: int = 2, nbytes: int = 32 << 20) -> None:
    """A token loop: one kernel, then ``copies`` device-to-device copies of ``nbytes`` (``copy_ns`` each) per step."""
    for i in range(steps):
        s = T0 + i * STEP
        b.nvtx("token", s, s + STEP - 10_000)
        b.kernel("loop_add_fusion", start=s + 10_000, duration=400_000, launch_at=s + 1_000)
        for k in range(copies):
            b.memcpy(s + 420_000 + k * copy_ns, copy_ns, nbytes, kind="DtoD", src="device", dst="device",
                     launch_at=s + 2_000 + k)


def test_a_cache_copied_every_step_is_reported_with_its_share(tmp_path):
    b = TraceBuilder()
    token_loop(b, copy_ns=60_000)  # 2 x 60 us of a 1 ms step: 12 %
    [f] = run_rule("device-copies", b.write(tmp_path / "t.sqlite"))
    m = values(f)
    assert f.severity.value == "warning" and f.budget_part == "copy"
    assert m["dtod_copies"] == 24 and m["steps_copying"] == 12 and m["largest_copy"] == 32 << 20
    assert m["dtod_bytes_per_step"] == 64 << 20 and m["dtod_gpu_time"] == 24 * 60_000
    assert m["dtod_share"] == pytest.approx(100 * 24 * 60_000 / (12 * STEP), abs=0.6)
    assert f.estimated_savings_ns == 24 * 60_000


def test_small_copies_are_not(tmp_path):
    b = TraceBuilder()
    token_loop(b, copy_ns=10_000)  # 2 % of the step
    assert run_rule("device-copies", b.write(tmp_path / "t.sqlite")) == []
    f = run_rule("device-copies", b.write(tmp_path / "u.sqlite"), options={"min_share_pct": 1.0})
    assert len(f) == 1 and f[0].severity.value == "info"


def test_copies_in_a_few_steps_only_are_not_the_loops(tmp_path):
    b = TraceBuilder()
    token_loop(b, copy_ns=0, copies=0)
    for i in (3, 9):  # two of twelve steps
        b.memcpy(T0 + i * STEP + 420_000, 500_000, 256 << 20, kind="DtoD", src="device", dst="device",
                 launch_at=T0 + i * STEP + 2_000)
    assert run_rule("device-copies", b.write(tmp_path / "t.sqlite")) == []


@pytest.mark.parametrize("kind,word", [("jax", "donate_argnums"), ("pytorch", "index_copy_"), ("cuda", "pointers")])
def test_the_fix_is_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    token_loop(b, copy_ns=60_000)
    [f] = run_rule("device-copies", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)
