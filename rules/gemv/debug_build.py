"""debug-build: the profiled program is a debug build, so its trace misleads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.rules.gemv.bandwidth import config_weight_bytes, device_shares, gemv_mask, measure_bandwidth, weight_bytes_value
from nsys_rules.api import (Finding, Location, MissingData, Renamed, Rule, RuleContext, Severity, command_evidence, metric,
                            pct, shell_join, shell_word)


@dataclass(frozen=True)
class Options:
    """Options of debug-build."""

    weight_bytes: object = field(default=None, metadata={
        "help": "bytes the GEMVs read per step, for the kernel evidence (as gemv-dominance.weight_bytes); unset: the "
                "host-to-device model load when the trace holds it"})
    model_config: str = field(default="", metadata={
        "help": "path to the model's Hugging Face config.json, for the weight bytes (as gemv-dominance.model_config)"})
    weight_dtype_bytes: float = field(default=0.0, metadata={
        "help": "bytes per weight for model_config (0: from its torch_dtype)"})
    steps: int = field(default=0, metadata={
        "help": "decode steps (tokens) in the window, as gemv-dominance.steps; 0: one per step-range instance"})
    max_bandwidth_pct: float = field(default=5.0, metadata={
        "help": "GEMV kernels below this percent of peak bandwidth look like device code built with -G"})
    min_gemv_share_pct: float = field(default=30.0, metadata={
        "help": "percent of kernel time in GEMVs needed before their bandwidth is used as evidence"})
    min_load_bytes: int = field(default=16 * 1024**2, metadata={
        "help": "host-to-device bytes before the steady state needed to count them as the model load"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight_bytes", weight_bytes_value(self.weight_bytes))
        if self.model_config:
            config_weight_bytes(self.model_config, self.weight_dtype_bytes)  # a bad path or config fails early
        if not 0 < self.max_bandwidth_pct <= 100:
            raise ValueError(f"max_bandwidth_pct must be in (0, 100], not {self.max_bandwidth_pct!r}")


# -- the rule ------------------------------------------------------------------------------
class DebugBuild(Rule):
    """The profiled program is a debug build.

    What it detects: the command line in the capture metadata (`PROCESS_0:COMMAND` and
    `PROCESS_0:ARGUMENT_n`) runs a debug build: an executable under `target/debug/` (also
    `target/<triple>/debug/`, `deps/`, `examples/`), `cargo run`/`cargo test` without
    `-r`/`--release` (or with `--profile dev`), a program in a Debug build folder
    (`cmake-build-debug/`, `build-debug/`, a multi-config `Debug/`), a debug Python
    interpreter (`python3-dbg`, `python3.11d`), or the program run under `compute-sanitizer` /
    `cuda-memcheck`. Kernel evidence: when the
    bytes the GEMVs read per step are known (`weight_bytes` or a captured host-to-device model
    load), GEMV-class kernels reaching under `max_bandwidth_pct` percent of peak bandwidth look like
    device code built with `-G`; without a debug command line that alone is a warning.
    Why it hurts: unoptimized host code inflates launch overhead and host gaps, and device
    code built with `-G` runs 10x or more slower; every number in such a trace describes the
    debug build, not the program, so optimizing from it misleads.
    Evidence: the command line and the signal found; GEMV time per step and share; achieved
    bandwidth against peak when the bytes are known.
    Next optimizations: re-capture the release build: the exact command is given (`cargo run
    -r ...`, `target/release/...`, a Release build folder).
    Options: `weight_bytes`, `model_config`, `weight_dtype_bytes`, `steps`, `max_bandwidth_pct`,
    `min_gemv_share_pct`, `min_load_bytes`.
    Requires: the capture metadata (command line); the kernel table for the kernel evidence.
    False positives: a custom cargo profile (`--profile bench-fast`) is not judged; a dev
    profile made fast with `CARGO_PROFILE_DEV_OPT_LEVEL=2/3` is not reported; a CMake Debug
    build optimizes device code unless `-G` was added, so its kernels may be fine while its host
    timings are not.
    """

    name = "debug-build"
    title = "Profiled program is a debug build"
    default_severity = Severity.ERROR
    requires = ()
    optional = ("kernels", "memcpy")
    columns = {"kernels": ("start", "end", "name", "device_id", "correlation_id", "pid"),
               "memcpy": ("start", "bytes", "copy_kind", "device_id", "dst_device_id", "correlation_id", "pid")}
    window = "steady"
    Options = Options
    renamed_options = {"max_bandwidth_fraction": Renamed("max_bandwidth_pct", 100),
                       "min_gemv_share": Renamed("min_gemv_share_pct", 100)}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        capture = ctx.trace.capture
        evidence = command_evidence(capture.command, capture.environment)
        kernel = self._kernel_evidence(ctx)
        if evidence is None and kernel is None:
            if not capture.command and not ctx.trace.has("kernels"):
                raise MissingData("the export records no command line and no kernels to judge",
                                  "capture with a recent nsys (`nsys profile ...` records PROCESS_0:COMMAND)")
            return
        metrics = dict(kernel["metrics"]) if kernel else {}
        if evidence is not None:
            message = f"The profiled command `{capture.command_line}` is a debug build: {evidence.reason}."
            if kernel:
                message += " GEMV-class kernels reach only " + kernel["text"]
            else:
                summary, summary_metrics = self._gemv_summary(ctx)
                message += (" " + summary) if summary else ""
                metrics.update(summary_metrics)
            if evidence.kind == "cargo":
                message += (" A cargo debug build runs host code unoptimized (launch overhead and host gaps "
                            "inflated), and a build script that compiles the CUDA kernels may build them for debug "
                            "too (-G / -O0): kernels can run 10x+ slower than in the release build.")
            elif evidence.kind == "cmake":
                message += (" A CMake Debug build runs host code at -O0 (launch overhead and host gaps inflated); "
                            "device code is also slow if -G is in CMAKE_CUDA_FLAGS_DEBUG.")
            else:
                message += " Host and kernel timings of this trace describe the debug setup, not the program."
            recapture = ctx.recapture_command(command=evidence.release_command)
            build = f"`{evidence.build_step}`, then " if evidence.build_step else ""
            alternative = ""
            if evidence.kind == "cargo" and evidence.binary:
                program_args = shell_join(capture.command[1:])
                cargo_run = f"cargo run -r --bin {shell_word(evidence.binary)}" + (
                    f" -- {program_args}" if program_args else "")
                alternative = (f" (or in one step: `{ctx.recapture_command(command=cargo_run)}`)")
            recommendation = (f"Profile the release build: {build}re-capture with `{recapture}`{alternative}. "
                              "Do not optimize from this trace.")
            yield ctx.finding(message, recommendation, severity=Severity.ERROR, metrics=metrics,
                              location=Location(), key="command")
            return
        assert kernel is not None
        message = ("GEMV-class kernels reach only " + kernel["text"] + " That is typical of device code compiled "
                   "with -G (device debug), although the command line does not look like a debug build.")
        recommendation = ("Check the nvcc flags of the CUDA kernels (build script / CMAKE_CUDA_FLAGS): remove `-G` "
                          "(keep `-lineinfo` for source-level profiling) and re-capture with "
                          f"`{ctx.recapture_command()}`; if the weight bytes given are wrong, fix "
                          f"`--set debug-build.weight_bytes=...`.")
        yield ctx.finding(message, recommendation, severity=Severity.WARNING, metrics=metrics,
                          title="GEMV kernels at a few percent of peak bandwidth (device debug build?)",
                          location=Location(device=kernel["device"]), key="kernels")

    def _kernel_evidence(self, ctx: RuleContext) -> dict | None:
        opts = ctx.options
        if not ctx.trace.has("kernels"):
            return None
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return None
        is_gemv = gemv_mask(kernels["name"])
        shares = device_shares(kernels, is_gemv)
        device = int(shares.index[0])
        share = float(shares.iloc[0]["share"] or 0.0)
        if share < opts.min_gemv_share_pct / 100:
            return None
        bw, _why = measure_bandwidth(ctx, kernels, is_gemv, device, weight_bytes=opts.weight_bytes,
                                     steps_option=opts.steps, peak_option=0.0, min_load_bytes=opts.min_load_bytes)
        if bw is None or bw.fraction is None or bw.fraction >= opts.max_bandwidth_pct / 100:
            return None
        source = {"option": "given", "model config": "from the model config"}.get(bw.source, "from the model load")
        text = (f"{100 * bw.fraction:.1f} % of the {(bw.peak or 0) / 1e12:.2f} TB/s peak: {bw.weight_bytes / 1e9:.3f} GB of "
                f"weights per step ({source}) in "
                f"{bw.gemv_ns_per_step / 1e3:.0f} us of GEMV time per step = {bw.achieved / 1e9:.1f} GB/s.")
        metrics = {"achieved_bandwidth": metric(bw.achieved, "B/s"), "bandwidth_fraction": metric(100 * bw.fraction, "%"),
                   "gemv_time_per_step": metric(bw.gemv_ns_per_step, "ns"), "weight_bytes": metric(bw.weight_bytes, "B")}
        return {"text": text, "metrics": metrics, "device": device}

    @staticmethod
    def _gemv_summary(ctx: RuleContext) -> tuple[str, dict]:
        """GEMV time of the window (text and metrics): the kernel side when the weight bytes are unknown."""
        if not ctx.trace.has("kernels"):
            return "", {}
        kernels = ctx.frame("kernels")
        if kernels.empty:
            return "", {}
        dur = (kernels["end"] - kernels["start"]).to_numpy()
        is_gemv = gemv_mask(kernels["name"])
        steps = len(ctx.window.steps)
        gemv_ns = float(dur[is_gemv].sum())
        total_ns = float(np.sum(dur))
        metrics = {"kernel_time": metric(total_ns, "ns"), "gemv_time": metric(gemv_ns, "ns")}
        if gemv_ns <= 0:
            return "", metrics
        metrics["gemv_share"] = metric(pct(gemv_ns, total_ns), "%")
        if steps:
            metrics["gemv_time_per_step"] = metric(gemv_ns / steps, "ns")
        per_step = f", {gemv_ns / steps / 1e3:.0f} us per step" if steps else ""
        return (f"GEMV-class kernels take {gemv_ns / 1e6:.2f} ms ({pct(gemv_ns, total_ns):.0f} % of kernel time"
                f"{per_step}); give `--set debug-build.weight_bytes=<bytes per step>` to compare them with the "
                "GPU's peak bandwidth.", metrics)


RULE = DebugBuild
