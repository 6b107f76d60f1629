"""fusion-candidate: GEMM-heavy steps that spend much of their GPU time in elementwise and reduction kernels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from nsys_rules.api import (Finding, Location, MissingData, Renamed, Rule, RuleContext, Severity, fusion_advice,
                            metric, pct)


@dataclass(frozen=True)
class Options:
    """Options of fusion-candidate."""

    min_share_pct: float = field(default=15.0, metadata={
        "help": "percent of the steps' busy GPU time in elementwise and reduction kernels that makes them a fusion "
                "candidate (the budget's evidence uses the same threshold)"})
    kept_pct: float = field(default=50.0, metadata={
        "help": "percent of that time a fused epilogue or a compiled graph typically removes (the point estimate; "
                "the range runs from half to one and a half times it)"})


class FusionCandidate(Rule):
    """Matrix-product steps whose elementwise and reduction kernels could be fused away.

    What it detects: steady steps whose largest busy part is GEMM (prefill, training, batched
    inference) and where elementwise and reduction kernels (activations, residual adds, casts,
    softmax, norms' reductions) take at least `min_share_pct` percent of the busy GPU time.
    Why it hurts: each of these kernels reads and writes whole activations from memory; fused into
    the GEMM's epilogue or into one generated kernel, the round trips disappear.
    Evidence: the share and time of elementwise and reduction kernels against the steps' busy time.
    Next optimizations: in the program's framework, PyTorch `torch.compile` (Inductor fuses
    pointwise chains and GEMM epilogues; already compiled: its graph breaks); vLLM, SGLang and
    TensorRT-LLM their own fusion options; JAX one `jax.jit` over the whole step (XLA fuses inside
    it) and Pallas for what remains; TensorFlow `jit_compile=True`; a CUDA program GEMM epilogues
    (cuBLASLt, CUTLASS) and fused kernels for the common pairs (bias + activation, residual + norm).
    Options: `min_share_pct`, `kept_pct`.
    Requires: a step model with its budget (steady steps).
    False positives: elementwise work that is the algorithm itself (sampling, a scan) fuses little;
    the range of the saving says how uncertain the estimate is.
    """

    name = "fusion-candidate"
    title = "Elementwise and reduction kernels in GEMM-heavy steps: a fusion candidate"
    default_severity = Severity.INFO
    requires = ()
    optional = ()
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"min_share": Renamed("min_share_pct"), "kept_fraction": Renamed("kept_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        budget = ctx.budget
        if budget is None:
            raise MissingData("no steady steps to judge", "mark the loop's steps with an NVTX range")
        kernels = {p.name: p.ns for p in budget.parts if p.kind == "busy" and p.name not in ("contention", "copy")}
        if not kernels or max(kernels, key=kernels.__getitem__) != "gemm":
            return
        small = budget.ns("elementwise", "reduce")
        busy = budget.busy_ns
        share = pct(small, busy)
        if share < opts.min_share_pct:
            return
        saving = opts.kept_pct / 100 * small
        fw = ctx.framework
        advice = fusion_advice(fw)
        yield ctx.finding(
            f"GEMM kernels take the largest part of the steady steps, and elementwise and reduction kernels take "
            f"{small / 1e6:.2f} ms ({share:.1f} % of the {busy / 1e6:.1f} ms busy GPU time, "
            f"{small / budget.steps / 1e3:.0f} us per step): memory round trips a fused kernel would not make. "
            f"Program: {fw.label}.",
            f"Fuse them: {advice}.",
            severity=Severity.INFO, budget_part="elementwise+reduce", estimated_savings_ns=saving,
            savings_range=(0.5 * saving, min(1.5 * saving, small)),
            metrics={"elementwise_reduce_time": metric(small, "ns"), "share_of_busy_time": metric(share, "%"),
                     "busy_time": metric(busy, "ns")},
            location=Location(device=budget.device))


RULE = FusionCandidate
