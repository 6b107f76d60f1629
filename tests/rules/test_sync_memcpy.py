"""sync-memcpy: built scenarios (firing, quiet, the 64,000-byte boundary, driver calls)."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.testing import metric_values as values
from tests.rules.scenarios import copies, foreign_words, program

T0 = 100_000_000




def test_sync_copy_back_is_flagged(tmp_path):
    b = TraceBuilder()
    copies(b, 2, kind="DtoH", src="device", dst="pinned", api="cudaMemcpy_v3020", nbytes=1 << 20)
    [f] = run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite"))  # one finding per direction and stream
    assert values(f)["copies"] == 2 and values(f)["bytes"] == 2 << 20
    assert f.estimated_savings_ns is None and "outside the steady steps" in f.savings_note  # no loop here


@pytest.mark.parametrize("nbytes,flagged", [(64_000, False), (64_001, True)])
def test_small_host_to_device_copies_are_exempt(tmp_path, nbytes, flagged):
    b = TraceBuilder()
    copies(b, 1, kind="HtoD", src="pinned", api="cudaMemcpy_v3020", nbytes=nbytes)
    assert bool(run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite"))) is flagged


def test_in_device_and_async_copies_are_not_sync_copies(tmp_path):
    b = TraceBuilder()
    copies(b, 2, kind="DtoD", src="device", api="cudaMemcpy_v3020", nbytes=1 << 20)
    copies(b, 2, kind="DtoH", src="device", dst="pinned", api="cudaMemcpyAsync_v3020", nbytes=1 << 20)
    assert run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite")) == []


def test_driver_sync_copy_is_ours_not_nvidias(tmp_path):
    b = TraceBuilder()
    copies(b, 1, kind="DtoH", src="device", dst="pageable", api="cuMemcpyDtoH_v2", nbytes=1 << 20)
    path = b.write(tmp_path / "t.sqlite")
    assert len(run_rule("sync-memcpy", path)) == 1
    assert run_rule("sync-memcpy", path, options={"include_driver_api": False}) == []


@pytest.mark.parametrize("kind,word", [("pytorch", ".item()"), ("jax", "jax.device_get"), ("cuda", "cudaMemcpyAsync")])
def test_readbacks_are_named_in_the_programs_framework(tmp_path, kind, word):
    b = program(kind)
    copies(b, 2, kind="DtoH", src="device", dst="pinned", api="cudaMemcpy_v3020", nbytes=1 << 20)
    [f] = run_rule("sync-memcpy", b.write(tmp_path / "t.sqlite"))
    assert word in f.recommendation and not foreign_words(kind, f.recommendation)
