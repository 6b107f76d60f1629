"""gemv-dominance: matrix-vector kernels take most of the steady-state GPU time (batch-1 decode)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from nsys_rules.rules.gemv.bandwidth import (Bandwidth, config_weight_bytes, device_shares, gemv_mask, measure_bandwidth,
                                           peak_bandwidth, per_step_time, weight_bytes_value)
from nsys_rules.rules.gemv.measured import MeasuredGemv, measured_gemv
from nsys_rules.api import (Finding, Location, MissingData, Renamed, Rule, RuleContext, Severity, metric, pct,
                            require_visible_kernels)
from nsys_rules.api.analysis import base_name, key_int


@dataclass(frozen=True)
class Options:
    """Options of gemv-dominance."""

    min_share_pct: float = field(default=50.0, metadata={
        "help": "report when GEMV-class kernels take at least this percent of steady-state kernel time"})
    weight_bytes: object = field(default=None, metadata={
        "help": "bytes the GEMVs read per step (weights of every linear layer incl. lm_head; active experts only "
                "for MoE; the shard of one GPU under tensor parallelism), e.g. 14e9 or 13G; unset: taken from the "
                "host-to-device model load when the trace holds it"})
    steps: int = field(default=0, metadata={
        "help": "decode steps (tokens per sequence) in the window; 0: one per step-range instance. Set it when "
                "the trace has no step range, or when one range holds several tokens (a request range)"})
    peak_bandwidth: float = field(default=0.0, metadata={
        "help": "peak memory bandwidth in B/s when the export lacks TARGET_INFO_GPU.memoryBandwidth (0: from trace)"})
    min_load_bytes: int = field(default=16 * 1024**2, metadata={
        "help": "host-to-device bytes before the steady state needed to count them as the model load"})
    roofline_pct: float = field(default=80.0, metadata={
        "help": "above this percent of peak bandwidth the GEMVs are at the memory roofline: quantize or batch",
        "max_pct": None})  # a percent of peak bandwidth, which caches can pass: __post_init__ takes 0-150
    room_pct: float = field(default=70.0, metadata={
        "help": "below this percent of peak bandwidth custom GEMV kernels have room",
        "max_pct": None})  # a percent of peak bandwidth, which caches can pass: __post_init__ takes 0-150
    target_pct: float = field(default=85.0, metadata={
        "help": "percent of peak bandwidth a good large GEMV reaches, used to estimate savings below room_pct",
        "max_pct": None})  # a percent of peak bandwidth, which caches can pass: __post_init__ takes 0-150
    min_savings_pct: float = field(default=5.0, metadata={
        "help": "estimated savings, as a percent of the steady state's GPU time (kernels, and the copies of the "
                "steps), that make low bandwidth a warning"})
    extra_gemv_patterns: tuple = field(default=(), metadata={
        "help": "extra regular expressions (kernel names) that are GEMV-class, e.g. ['my_matvec', 'w4a16_decode']"})
    model_config: str = field(default="", metadata={
        "help": "path to the model's Hugging Face config.json: weight bytes per step computed from it (linear layers "
                "and lm_head, active experts only) when weight_bytes is not given"})
    weight_dtype_bytes: float = field(default=0.0, metadata={
        "help": "bytes per weight for model_config (0: from its torch_dtype; 1 for int8/fp8, 0.5 for int4)"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight_bytes", weight_bytes_value(self.weight_bytes))
        if self.model_config:
            config_weight_bytes(self.model_config, self.weight_dtype_bytes)  # a bad path or config fails early
        for name in ("min_share_pct", "roofline_pct", "room_pct", "target_pct", "min_savings_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 150:
                raise ValueError(f"{name} must be a percent (0-150), not {value!r}")


class GemvDominance(Rule):
    """Matrix-vector kernels take most of the steady-state GPU time.

    What it detects: in the steady state, GEMV-class kernels (cuBLAS `gemv*`, cuBLASLt
    `nvjet_*` tiles with a side of 8 or 16, custom `*gemv*` kernels; see
    `nsys_rules.analysis.taxonomy`, extensible with `extra_gemv_patterns`) take at least `min_share_pct` percent of
    the kernel time of a GPU: the signature of batch-1 decode. When the bytes they read per
    step are known (the `weight_bytes` option, a Hugging Face `config.json` given as
    `model_config`, or the host-to-device volume of a model load captured before the steady
    state), it computes the achieved bandwidth against the GPU's
    peak (`TARGET_INFO_GPU.memoryBandwidth` of the kernels' device).
    Why it hurts: a GEMV does two flops per weight byte, so it is bound by memory bandwidth:
    the step time is the weight bytes over the bandwidth the kernels reach. Large GEMVs reach
    85-90 % of peak, small ones (< 5 MB) 60-70 %.
    With GPU metrics in the trace (`nsys profile --gpu-metrics-devices=all`) no bytes are needed:
    the DRAM read bandwidth while the GEMVs run is measured (the step budget's GEMV part,
    unmixed from the samples) and the verdict comes from it; when weight bytes are known too,
    both are shown and a disagreement beyond 15 % is named with its likely cause.
    Evidence: GEMV time and share per device, GEMV time per step, and when known the weight
    bytes, their source, achieved bandwidth and its fraction of peak; the measured DRAM
    bandwidth, its fraction of peak and the DRAM bytes per step when the trace has GPU metrics.
    Next optimizations: above `roofline_pct` percent of peak the kernels are done: read fewer
    bytes per token (weight-only int8/fp8/int4 quantization) or more tokens per read
    (batching, speculative decoding). Below `room_pct`, custom GEMV kernels have room
    (vectorized 128-bit loads, split-K for skinny shapes, fused QKV / gate-up projections);
    the saving to `target_pct` of peak is estimated. Without bytes or GPU metrics, give
    `--set gemv-dominance.weight_bytes=...` (or capture with `nsys-rules profile --metrics`) to
    get the bandwidth.
    Options: `min_share_pct`, `weight_bytes`, `model_config`, `weight_dtype_bytes`, `steps`,
    `peak_bandwidth`, `min_load_bytes`, `roofline_pct`, `room_pct`, `target_pct`,
    `min_savings_pct`, `extra_gemv_patterns`.
    Requires: the kernel table; the memcpy table for the model-load bytes; NVTX step ranges
    (or the `steps` option) for per-step numbers.
    False positives: the model-load copy volume includes the embedding table, which a step
    reads one row of, so bandwidth from the load is an upper bound; MoE steps read only the
    active experts (give `weight_bytes` for them). GEMM-bound work (prefill) is not reported.
    """

    name = "gemv-dominance"
    title = "GEMV-dominated GPU time (bandwidth-bound decode)"
    default_severity = Severity.INFO
    requires = ("kernels",)
    optional = ("memcpy",)
    columns = {"kernels": ("start", "end", "name", "device_id", "correlation_id", "pid"),
               "memcpy": ("start", "bytes", "copy_kind", "device_id", "dst_device_id", "correlation_id", "pid")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"min_share": Renamed("min_share_pct", 100), "roofline_fraction": Renamed("roofline_pct", 100),
                       "room_fraction": Renamed("room_pct", 100), "target_fraction": Renamed("target_pct", 100),
                       "min_savings_share": Renamed("min_savings_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        require_visible_kernels(ctx.budget)
        kernels = ctx.frame("kernels")
        if kernels.empty:
            hint = (" (CUDA graph replays traced in graph mode hide their kernels)"
                    if ctx.trace.has("graph_trace") else "")
            total = ctx.trace.row_count("kernels")
            what = (f"none of the trace's {total:,} kernels was launched in the window" if total else
                    "no kernel ran in the window")  # kernels ran: the window (or their launch calls) left them out
            raise MissingData(f"{what} ({ctx.window.source}){hint}",
                              "re-capture with `--cuda-graph-trace=node`, or widen --filter-time/--filter-nvtx")
        is_gemv = gemv_mask(kernels["name"], opts.extra_gemv_patterns)
        for device, row in device_shares(kernels, is_gemv).iterrows():
            share = float(row["share"]) if pd.notna(row["share"]) else 0.0
            if share < opts.min_share_pct / 100 or row["gemv"] <= 0:
                continue
            yield self._finding(ctx, kernels, is_gemv, key_int(device), row, share)

    def _finding(self, ctx: RuleContext, kernels: pd.DataFrame, is_gemv: np.ndarray, device: int, row: pd.Series,
                 share: float) -> Finding:
        opts = ctx.options
        total_ns, gemv_ns = int(row["total"]), int(row["gemv"])
        bw, why = measure_bandwidth(ctx, kernels, is_gemv, device, weight_bytes=opts.weight_bytes,
                                    steps_option=opts.steps, peak_option=opts.peak_bandwidth,
                                    min_load_bytes=opts.min_load_bytes)
        gpu = ctx.trace.gpu(device)
        gpu_name = gpu.name if gpu else f"GPU {device}"
        top = _top_gemv(kernels, is_gemv, device)
        metrics = {"gemv_time": metric(gemv_ns, "ns"), "kernel_time": metric(total_ns, "ns"),
                   "gemv_share": metric(100 * share, "%"), "gemv_kernels": metric(int(row["gemv_count"]), "count")}
        message = (f"GEMV-class kernels take {100 * share:.1f} % of steady-state kernel time on {gpu_name} "
                   f"(device {device}): {gemv_ns / 1e6:.2f} ms of {total_ns / 1e6:.2f} ms, "
                   f"{int(row['gemv_count'])} launches; top: {top}.")
        severity, savings = Severity.INFO, None
        peak, peak_why = peak_bandwidth(ctx, device, opts.peak_bandwidth)
        measured = measured_gemv(ctx, kernels, is_gemv, device, peak)
        if measured is not None:
            # The GPU metrics measured the GEMVs' DRAM traffic: no weight bytes needed, the verdict comes from it.
            text, numbers, recommendation, severity, savings = self._measured(ctx, measured, bw, gemv_ns, total_ns,
                                                                              _library_share(kernels, is_gemv, device))
            metrics.update(numbers)
            return ctx.finding(message + text, recommendation, severity=severity, metrics=metrics,
                               location=Location(device=device), estimated_savings_ns=savings, budget_part="gemv")
        if bw is None:
            message += f" Achieved bandwidth not computed: {why}."
            recommendation = self._no_bytes_advice(ctx, kernels, is_gemv, device, peak)
            if peak is None:
                message += f" Peak bandwidth unknown: {peak_why}."
        else:
            metrics.update({"weight_bytes": metric(bw.weight_bytes, "B"), "gemv_time_per_step": metric(bw.gemv_ns_per_step, "ns"),
                            "steps": metric(bw.steps, "count"), "achieved_bandwidth": metric(bw.achieved, "B/s")})
            src = {"option": "given", "model config": "from " + ctx.options.model_config}.get(
                bw.source, "from the host-to-device model load, an upper bound")
            message += (f" Per step ({bw.steps_source}; one token each) the GEMVs take {bw.gemv_ns_per_step / 1e3:.1f} us for "
                        f"{bw.weight_bytes / 1e9:.3f} GB "
                        f"of weights ({src}): {bw.achieved / 1e12:.2f} TB/s achieved")
            if bw.fraction is None:
                message += f"; peak unknown, so no band: {why}."
                recommendation = ("Give the GPU's peak memory bandwidth with `--set gemv-dominance.peak_bandwidth=<B/s>` "
                                  "to judge the achieved bandwidth against it.")
            else:
                frac = bw.fraction
                metrics.update({"peak_bandwidth": metric(bw.peak or 0, "B/s"), "bandwidth_fraction": metric(100 * frac, "%")})
                message += f", {100 * frac:.0f} % of the {(bw.peak or 0) / 1e12:.2f} TB/s peak."
                library = _library_share(kernels, is_gemv, device)
                # GPU time is the steps' busy time on the device, copies included: on a step that mostly
                # copies (weights offloaded to the host), faster GEMVs win a small share of it.
                budget = ctx.budget
                gpu_ns = max(total_ns, budget.busy_ns) if budget is not None and budget.device == device else total_ns
                copying = budget.ns("copy") if budget is not None and budget.device == device else 0
                if copying > total_ns:
                    message += (f" The steps' GPU is busy copying for {copying / 1e6:.2f} ms, more than all its kernels "
                                f"({total_ns / 1e6:.2f} ms): the copies come first (step-uploads).")
                recommendation, severity, savings = self._band_advice(ctx, frac, bw, gemv_ns, gpu_ns, library)
        return ctx.finding(message, recommendation, severity=severity, metrics=metrics,
                           location=Location(device=device), estimated_savings_ns=savings, budget_part="gemv")

    def _measured(self, ctx: RuleContext, m: MeasuredGemv, bw: Bandwidth | None, gemv_ns: int, total_ns: int,
                  library: float) -> tuple[str, dict, str, Severity, float | None]:
        """The sentence, numbers, advice, severity and savings when the GPU metrics measured the GEMVs."""
        numbers = {"measured_bandwidth": metric(m.read_bps, "B/s"), "measured_read_pct": metric(m.read_pct, "%"),
                   "measured_fraction": metric(100 * m.fraction, "%"), "peak_bandwidth": metric(m.peak, "B/s"),
                   "measured_samples": metric(m.samples, "count")}
        write = f"; writes add {m.write_pct:.0f} %" if m.write_pct is not None and m.write_pct >= 0.5 else ""
        text = (f" GEMV kernels read DRAM at {m.read_bps / 1e12:.2f} TB/s, {m.read_pct:.0f} % of the "
                f"{m.peak / 1e12:.2f} TB/s peak, measured ({m.samples} GPU metrics samples{m.rate_text}; "
                f"±{m.read_stderr:.1f} points{write}).")
        advice_bw = Bandwidth(int(m.bytes_per_step), "measured", m.gemv_ns_per_step, m.steps,
                              m.read_bps + (m.write_bps or 0.0), m.peak, m.steps_source)
        note = ""
        if m.gemv_ns_per_step > 0:
            numbers["measured_dram_bytes_per_step"] = metric(int(m.bytes_per_step), "B")
            numbers["gemv_time_per_step"] = metric(m.gemv_ns_per_step, "ns")
        if bw is not None:
            numbers.update({"weight_bytes": metric(bw.weight_bytes, "B"), "achieved_bandwidth": metric(bw.achieved, "B/s")})
            if bw.fraction is not None:
                numbers["bandwidth_fraction"] = metric(100 * bw.fraction, "%")
            src = {"option": "given", "model config": "from " + ctx.options.model_config}.get(
                bw.source, "from the host-to-device model load, an upper bound")
            text += (f" From the weight bytes ({bw.weight_bytes / 1e9:.3f} GB per step, {src}) over "
                     f"{bw.gemv_ns_per_step / 1e3:.1f} us of GEMV per step: {bw.achieved / 1e12:.2f} TB/s")
            text += f", {100 * bw.fraction:.0f} % of peak" if bw.fraction is not None else ""
            ratio = m.read_bps / bw.achieved if bw.achieved > 0 else float("inf")
            if abs(ratio - 1) <= AGREE:
                text += f"; the measurement agrees (within {100 * AGREE:.0f} %)."
            else:
                read_gb = m.read_bps * bw.gemv_ns_per_step / 1e18
                why = ("a step reads them more than once (several tokens per step: give `--set gemv-dominance.steps=N`), "
                       "or the weight bytes are too low" if ratio > 1 else
                       "the weight bytes count more than a step reads (the model-load copy includes the embedding "
                       "table and other buffers), or part of the weights stays in the L2 cache")
                text += (f"; they disagree: the GEMVs read {read_gb:.2f} GB of DRAM per step, {ratio:.2f}x the weight "
                         f"bytes: {why}. The measured figure is the verdict's.")
                note = " (The weight-bytes estimate disagrees with the measurement; see the message.)"
        recommendation, severity, savings = self._band_advice(ctx, m.fraction, advice_bw, gemv_ns, total_ns, library)
        return text, numbers, recommendation + note, severity, savings

    @staticmethod
    def _band_advice(ctx: RuleContext, frac: float, bw: Bandwidth, gemv_ns: int, gpu_ns: int,
                     library: float = 0.0) -> tuple[str, Severity, float | None]:
        """Advice, severity and savings for a band of achieved bandwidth; ``gpu_ns`` the GPU time savings are weighed against."""
        opts = ctx.options
        per_step_us = bw.gemv_ns_per_step / 1e3
        if frac > opts.roofline_pct / 100:
            saved = gemv_ns / 2
            return (f"The GEMVs run at the memory roofline ({100 * frac:.0f} % of peak), so faster kernels cannot help: "
                    f"cut the bytes read per token. Weight-only int8/fp8 quantization halves them (about "
                    f"{per_step_us / 2:.0f} us of {per_step_us:.0f} us GEMV time per step, {saved / 1e6:.1f} ms over the "
                    "window), int4 quarters them; or read each weight for more tokens: batch requests "
                    "(continuous batching) or use speculative decoding.", Severity.INFO, saved)
        if frac < opts.room_pct / 100:
            ideal_ns = bw.gemv_ns_per_step * frac / (opts.target_pct / 100)
            saved = (bw.gemv_ns_per_step - ideal_ns) * bw.steps
            severity = Severity.WARNING if saved >= opts.min_savings_pct / 100 * gpu_ns else Severity.INFO
            head = (f"Custom GEMV kernels have room: at {opts.target_pct:.0f} % of peak the GEMVs would "
                    f"take {ideal_ns / 1e3:.0f} us instead of {per_step_us:.0f} us per step (saving {saved / 1e6:.2f} ms "
                    f"over {bw.steps} steps). ")
            if library >= 0.5:
                # cuBLAS/cuBLASLt run batch-1 products through GEMM tiles (nvjet_*_256x8_...): general
                # kernels whose N=8 tile wastes most of the MMA work and whose split-K adds a reduction.
                body = (f"{100 * library:.0f} % of the GEMV time is in library GEMM tiles (cuBLAS/cuBLASLt) run at "
                        "N=1: replace those calls with a dedicated decode GEMV kernel (one warp per block of output "
                        "rows, 128-bit weight loads, no split-K reduction pass), fuse Q/K/V and gate/up into one GEMV "
                        "each (fewer, larger GEMVs reach a higher fraction of peak).")
            else:
                body = ("Use 128-bit vectorized weight loads with one warp per output row block, split-K for the "
                        "skinny shapes, fuse the Q/K/V and gate/up projections into one GEMV each, and check the small "
                        "GEMVs (< 5 MB of weights) first: they reach the lowest fraction of peak.")
            return head + body, severity, saved
        return (f"The GEMVs reach {100 * frac:.0f} % of peak, close to what large GEMVs achieve (85-90 %): little "
                "is left in the kernels. The next gains are fewer bytes per token (int8/fp8 weight-only "
                "quantization) or more tokens per weight read (batching, speculative decoding).", Severity.INFO, None)

    @staticmethod
    def _no_bytes_advice(ctx: RuleContext, kernels: pd.DataFrame, is_gemv: np.ndarray, device: int,
                         peak: float | None) -> str:
        on_device = (kernels["device_id"].to_numpy() == device) & is_gemv
        per_step, used = per_step_time(kernels["launch_start"].to_numpy()[on_device],
                                       (kernels["end"] - kernels["start"]).to_numpy()[on_device], ctx.window.steps)
        reference = ""
        if used and peak:
            reference = (f" For reference, {per_step / 1e3:.0f} us of GEMV per step is the time to read "
                         f"{per_step * peak / 1e18:.3f} GB at the {peak / 1e12:.2f} TB/s peak: if your per-step weight "
                         "bytes are well below that, the GEMV kernels run below the memory roofline.")
        return ("This is bandwidth-bound decode: give the bytes the GEMVs read per step (about 2 x active parameters "
                "for bf16, lm_head included) with `--set gemv-dominance.weight_bytes=<bytes>`, or point "
                "`--set gemv-dominance.model_config=<path/to/config.json>` at the model's config, to get the achieved "
                "bandwidth and the next step (> 80 % of peak: quantize or batch; < 70 %: tune the GEMV kernels)."
                + reference)


#: The measured bandwidth and the weight-bytes estimate agree when they differ by at most this fraction.
AGREE = 0.15

_LIBRARY_GEMV = ("nvjet", "cublas", "gemv2", "gemvx", "gemvnsp", "xmma", "cutlass", "sgemm", "hgemm")


def _library_share(kernels: pd.DataFrame, is_gemv: np.ndarray, device: int) -> float:
    """Fraction of the device's GEMV time in library kernels (cuBLAS/cuBLASLt/CUTLASS names)."""
    on_device = (kernels["device_id"].to_numpy() == device) & is_gemv
    sub = kernels.loc[on_device, ["name", "start", "end"]]
    times = (sub["end"] - sub["start"]).groupby(sub["name"], observed=True).sum()
    total = float(times.sum())
    if total <= 0:
        return 0.0
    library = sum(float(v) for n, v in times.items() if any(m in str(n).lower() for m in _LIBRARY_GEMV))
    return library / total


def _top_gemv(kernels: pd.DataFrame, is_gemv: np.ndarray, device: int, count: int = 3) -> str:
    on_device = (kernels["device_id"].to_numpy() == device) & is_gemv
    sub = kernels.loc[on_device, ["name", "start", "end"]]
    times = (sub["end"] - sub["start"]).groupby(sub["name"], observed=True).sum().sort_values(ascending=False)
    total = float(times.sum()) or 1.0
    return ", ".join(f"{_short(str(n))} {pct(float(v), total):.0f} %" for n, v in times.head(count).items())


def _short(name: str, limit: int = 60) -> str:
    base = base_name(name)
    return base if len(base) <= limit else base[: limit - 3] + "..."


RULE = GemvDominance
