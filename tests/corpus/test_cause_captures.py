"""Issue 37's own captures (tests/data/causes, when merged): each cause named with its evidence.

- ``cx_jax_readback_sampled``: JAX training with ``float(loss)`` every step (a 4-byte readback, a host
  callback and an OS wait, no CUDA sync call): a sync-class finding from the OS waits, JAX's fix, no
  PyTorch words;
- ``cx_jax_tokens``: a JAX token loop whose K/V caches are copied device to device every call (no
  donation): device-copies with ``donate_argnums``.

Each case skips while its capture is absent (the captures are made on a GPU machine and merged apart).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.capture_verdicts import packed_report
from tests.cause_evidence import cause_evidence_problems

CAUSES = Path(__file__).resolve().parents[1] / "data" / "causes"


def _report(name: str, into: Path) -> dict:
    packed = CAUSES / f"{name}.sqlite.xz"
    if not packed.exists():
        pytest.skip(f"{packed} is absent (issue 37's captures not merged yet)")
    return packed_report(packed, into)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("causes")


def test_a_jax_readback_without_a_sync_call_is_a_sync_with_jax_advice(unpacked):
    report = _report("cx_jax_readback_sampled", unpacked)
    [sync] = [f for f in report["findings"] if f["rule"] == "sync-stall"]
    assert sync["metrics"]["host_waits_on_readbacks"]["value"] >= 3
    assert "float(loss)" in sync["message"] and "torch" not in sync["recommendation"].lower()
    assert cause_evidence_problems(report) == []


def test_jax_caches_copied_every_token_are_device_copies_with_donation(unpacked):
    report = _report("cx_jax_tokens", unpacked)
    [copies] = [f for f in report["findings"] if f["rule"] == "device-copies"]
    assert copies["metrics"]["largest_copy"]["value"] >= 32 << 20
    assert "donate_argnums" in copies["recommendation"]
