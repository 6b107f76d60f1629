"""How sync-stall weighs its evidence: what removing the round trip saves, and how severe that is."""

from __future__ import annotations

from dataclasses import dataclass

from nsys_rules.api import Severity, pct
from nsys_rules.rules.sync_stall.measure import SyncEvidence


@dataclass(frozen=True)
class SyncVerdict:
    """The saving and the severity of one sync-stall finding."""

    savings: int  # ns given back to the steady state
    severity: Severity
    structural: bool  # a sync in every step parks the launching thread for most of the step
    by_structure_only: bool  # a warning for that reason alone (the saving is below the warning share)
    host_bound: bool  # the host's own pace, not the wait, limits what the saving can be

    def savings_pct(self, evidence: SyncEvidence) -> float:
        """The saving as a percent of the steady state."""
        return pct(self.savings, evidence.steady_ns)


def judge(evidence: SyncEvidence, warn_share_pct: float, structural_block_pct: float) -> SyncVerdict:
    """Savings and severity of ``evidence`` under the rule's options."""
    ev = evidence
    # What removing the sync gives back: per call, the GPU's idle stretch after it returned (the
    # bubble), but never more than the host waited in it. Without the wait the host runs its own
    # work back to back: a host that needs longer than the GPU per step (launch-bound) still
    # needs that time, so only its blocked time goes; a GPU-bound loop loses the bubble instead.
    # In total no more than the bubbles' union and the budget's after-sync idle (which also
    # counts the wake-up before the return).
    # A host's OS wait on a readback (no CUDA sync call) is valued like a sync; the budget's after-sync part,
    # which knows only CUDA syncs, does not hold its bubble, so its recoverable time adds to that bound.
    savings = min(ev.recoverable, ev.bubble_total, ev.after_sync + ev.host_wait_recoverable)
    # Severity follows the GPU time at stake (the bubbles). One exception, said in the message: a
    # round trip every step that parks the launching thread for most of the step puts all host work
    # of the loop (scheduling, sampling, detokenizing) in series with the GPU, however small the
    # captured benchmark's own host work is.
    structural = ev.per_step is not None and ev.per_step >= 0.9 and ev.share >= structural_block_pct
    by_savings = pct(savings, ev.steady_ns) >= warn_share_pct
    return SyncVerdict(
        savings=savings, severity=Severity.WARNING if by_savings or structural else Severity.INFO,
        structural=structural, by_structure_only=structural and not by_savings,
        # Most of each bubble is the host's own work before its next launch, which it needs anyway.
        host_bound=ev.recoverable < min(ev.bubble_total, ev.after_sync + ev.host_wait_recoverable) * 0.5)
