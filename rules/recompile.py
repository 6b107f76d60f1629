"""recompile: code compiled or CUDA graphs captured again inside the measured loop, named as what it is."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (Finding, Framework, Location, Rule, RuleContext, Severity, StepFacts, StepModel,
                            compiles_only, library_of, metric, pct, step_lengths)


@dataclass(frozen=True)
class Options:
    """Options of recompile."""

    min_share_pct: float = field(default=0.5, metadata={
        "help": "percent of the loop's time the extra time of compiling or capturing must reach to be reported"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the loop's time for a warning"})
    max_step_pct: float = field(default=10.0, metadata={
        "help": "percent of the steady steps above which loads in every step are module-loading's to report"})


#: The idle parts a compile or capture inside a steady step lands in.
_IDLE_PARTS = "module_loading+host_prep+launch_wait+after_sync"


@dataclass(frozen=True)
class Event:
    """Steps of the loop that compiled code or captured graphs, and what they cost over a usual step."""

    what: str  # "capture", "compile" (host time compiling before the loads) or "load" (the load calls themselves)
    steps: tuple[int, ...]  # 1-based loop step numbers (after warm-up)
    extra_ns: int  # time over the median steady step, summed
    loads: int
    captures: int
    in_steady: bool  # inside the steady steps (else an earlier regime, left out of them)
    library: str = ""  # what the loaded code was for: cudnn, triton, gemm (kernels launched right after the loads)


class Recompile(Rule):
    """GPU code is compiled, or CUDA graphs are captured, inside the measured loop instead of before it.

    What it detects: steps after warm-up that hold module loads (`cuModuleLoadData`,
    `cuLibraryLoadData`: a JIT compile's output being loaded, or a kernel's first use under lazy
    loading when the load calls themselves are the step's extra time) or graph capture calls
    (`cudaStreamBeginCapture`, `cudaGraphInstantiate`), one-off (a recompile for a new shape in
    step 10 of 20) or in every step of an earlier regime (a new shape each step until the loop
    settles); loads in more than `max_step_pct` percent of the steady steps are module-loading's,
    unless each of those steps takes over ten median steps (a few recompiles, named one by one with
    their cost per step). After the program's own NVTX `warmup` range every step is measured, so a
    compile in the first measured steps is named here, not absorbed as warm-up.
    Why it hurts: each such step waits for a compiler (Triton, XLA, cuDNN's runtime fusion, NVRTC)
    or a graph capture, milliseconds to seconds that a warm-up before the loop would have paid once.
    Evidence: the steps, their extra time over the median step, the load and capture calls, the
    framework.
    Next optimizations: in the program's own framework: torch.compile: mark the changing dimension
    dynamic or pad to a few shapes and warm each up, `TORCH_LOGS=recompiles`; CUDA graphs: capture
    every shape bucket before the loop; JAX: pad to fixed shapes, `JAX_LOG_COMPILES=1`; a CUDA
    program: load and compile modules at start-up.
    Options: `min_share_pct`, `warn_share_pct`, `max_step_pct`.
    Requires: a step model and the API table.
    False positives: a benchmark that meets each shape once by design (a sweep) compiles by design.
    """

    name = "recompile"
    title = "Code compiled or CUDA graphs captured inside the measured loop"
    default_severity = Severity.WARNING
    requires = ("api",)
    optional = ("kernels",)
    # Only the names of the kernels after a load are read; the other kernel columns would be 37 MB on 1M kernels.
    columns = {"api": ("start", "end", "name", "pid", "tid"), "kernels": ("start", "end", "name")}
    window = "steady"
    Options = Options

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        model = ctx.steps
        if model is None or not model.count:
            return
        opts = ctx.options
        durations = step_lengths(model.gpu_durations, model.host)
        median = float(np.median(durations))
        facts = ctx.step_facts(model.host, model.pid)
        events = _steady_events(facts, durations, median, model.count, opts.max_step_pct / 100)
        events += _regime_events(model.regimes, median)
        events = [_with_library(ctx, e, model) for e in events]
        loop_ns = int(durations.sum()) + sum(r.count * r.median_ns for r in model.regimes if not r.steady)
        fw = ctx.framework
        for event in events:
            share = pct(event.extra_ns, loop_ns)
            if share < opts.min_share_pct:
                continue
            # A kernel loaded at its first use costs once in the whole run: information, not a warning.
            warn = share >= opts.warn_share_pct and event.what != "load"
            yield ctx.finding(
                _message(event, median, model.count, share, fw), _advice(event, fw),
                severity=Severity.WARNING if warn else Severity.INFO,
                # The compiler's or the capture's host time is idle time of the step, wherever the budget put it
                # (a block of host work, the wait for a launch); an earlier regime is outside the steady budget.
                estimated_savings_ns=event.extra_ns,
                budget_part=_grown_parts(ctx, event) if event.in_steady else "outside",
                savings_note=None if event.in_steady else "in steps before the steady state, outside its budget",
                metrics={"steps": metric(len(event.steps), "count"), "extra_time": metric(event.extra_ns, "ns"),
                         "module_loads": metric(event.loads, "count"), "graph_captures": metric(event.captures, "count"),
                         "median_step": metric(int(median), "ns"), "loop_time": metric(loop_ns, "ns")},
                # Regime steps count from the end of warm-up, not among the steady steps: only steady ones are named.
                location=Location(pid=model.pid, steps=event.steps if event.in_steady else None),
                key=f"{event.what}:{'steady' if event.in_steady else 'regime'}")


def _steady_events(facts: StepFacts, durations: np.ndarray, median: float, count: int,
                   max_share: float) -> list[Event]:
    """One event per kind (capture, compile) among the steady steps: the steps holding it and their extra time."""
    out = []
    captures = facts.graph_captures > 0
    loads = (facts.module_loads > 0) & ~captures
    for what, held in (("capture", captures), ("compile", loads)):
        steps = np.flatnonzero(held)
        if not len(steps) or (what == "compile" and len(steps) > max_share * count
                              and not compiles_only(durations[steps], median, count)):
            continue  # loads in many steps are the loop's pattern: module-loading reports it
        extra = int(np.maximum(durations[steps] - median, 0).sum())
        if what == "compile" and int(facts.module_load_ns[steps].sum()) >= 0.5 * extra:
            what = "load"  # the load calls are the cost: a kernel's first use loading lazily, nothing compiled
        out.append(Event(what, tuple(int(s) + 1 for s in steps), extra, int(facts.module_loads[steps].sum()),
                         int(facts.graph_captures[steps].sum()), True))
    return out


def _with_library(ctx: RuleContext, event: Event, model: StepModel) -> Event:
    """The event with the library its code was for, from the kernels launched right after its steps' loads."""
    if event.what == "capture" or not event.in_steady:
        return event
    api = ctx.trace.frame("api", ["start", "name"])
    loads = np.flatnonzero(ctx.trace.api_names().isin(["cuModuleLoadData", "cuModuleLoadDataEx", "cuLibraryLoadData",
                                                       "cuModuleLoad", "cuLibraryLoadFromFile", "cuModuleLoadFatBinary"]))
    starts = api["start"].to_numpy(np.int64)[loads]
    steps = np.asarray(event.steps) - 1
    inside = np.zeros(len(starts), bool)
    for s in steps.tolist():
        inside |= (starts >= model.host[s, 0]) & (starts <= model.host[s, 1])
    return dataclasses.replace(event, library=library_of(ctx.kernels_after(starts[inside])))


def _grown_parts(ctx: RuleContext, event: Event) -> str:
    """The idle parts that grew in the event's steps over their median step: where its time went."""
    budget = ctx.budget
    if budget is None:
        return _IDLE_PARTS
    steps = np.asarray(event.steps) - 1
    grown: list[tuple[float, str]] = []
    for name in _IDLE_PARTS.split("+"):
        values = budget.per_step.get(name)
        if values is not None and len(values) > int(steps.max()):
            extra = float(values[steps].sum() - len(steps) * np.median(values))
            if extra > 0.1 * max(event.extra_ns, 1):
                grown.append((extra, name))
    return "+".join(name for _, name in sorted(grown, reverse=True)) or _IDLE_PARTS


#: The module loads a step of an earlier regime holds, as its cause says them (nsys_rules.model.regime_causes).
_REGIME_LOADS = re.compile(r"\((\d+(?:\.\d+)?) module load\(s\) a step")


def _regime_events(regimes: Iterable, median: float) -> list[Event]:
    """Earlier regimes whose cause is code built or graphs captured in every step."""
    out = []
    for r in regimes:
        if r.steady or not ("module load" in r.cause or "captured again" in r.cause):
            continue
        what = "capture" if "captured again" in r.cause else "compile"
        extra = int(max(r.median_ns - median, 0) * r.count)
        # The regime's evidence, carried into the finding's metrics (module loads, or a capture a step).
        per_step = _REGIME_LOADS.search(r.cause)
        loads = round(float(per_step.group(1)) * r.count) if per_step else 0
        captures = r.count if what == "capture" else 0
        out.append(Event(what, tuple(range(r.first + 1, r.first + r.count + 1)), extra, loads, captures, False))
    return out


def _message(event: Event, median: float, count: int, share: float, fw: Framework) -> str:
    steps = event.steps
    where = f"step {steps[0]}" if len(steps) == 1 else (
        f"steps {steps[0]}-{steps[-1]}" if steps[-1] - steps[0] + 1 == len(steps) else
        f"{len(steps)} steps ({', '.join(map(str, steps[:5]))}{', ...' if len(steps) > 5 else ''})")
    if event.what == "capture":
        what = f"CUDA graphs were captured again ({event.captures} capture/instantiate calls)" if event.in_steady \
            else "CUDA graphs were captured again in every step"
    elif event.library == "gemm":
        what = f"the GEMM library picked and loaded a kernel for a shape first seen there ({event.loads} module loads)"
    elif event.what == "load":
        what = f"GPU code was loaded at its first use ({event.loads} module loads, lazy loading)"
    else:
        what = f"GPU code was compiled and loaded ({event.loads} module loads)" if event.in_steady \
            else f"new GPU code was built in every step ({event.loads} module loads)"
    scope = f"of the {count} steady steps" if event.in_steady else "before the steady state (an earlier regime)"
    each = f" ({event.extra_ns / len(steps) / 1e6:.2f} ms per step)" if len(steps) > 1 else ""
    return (f"In {where} {scope} {what}: {event.extra_ns / 1e6:.2f} ms over the median step of {median / 1e6:.2f} ms"
            f"{each}, {share:.1f} % of the loop's time. Program: {fw.label}.")


def _advice(event: Event, fw: Framework) -> str:
    if event.what == "capture":
        if fw.is_torch:
            return ("A new shape reached a captured region, so its CUDA graph was captured again inside the loop: "
                    "capture every shape bucket before the measured loop (run each padded length once in warm-up), "
                    "or pad inputs to the shapes already captured; with torch.compile(mode=\"reduce-overhead\"), "
                    "fewer buckets or `torch._dynamo.mark_dynamic` on the growing dimension.")
        if fw.name == "jax":
            return ("XLA built and captured a new command buffer for a new shape: pad inputs to a few fixed shapes "
                    "and run each once before the loop; `JAX_LOG_COMPILES=1` names the function and shapes.")
        return ("The graph is captured again inside the loop: capture and instantiate every variant once at "
                "start-up and replay it (update parameters with cudaGraphExecUpdate instead of re-capturing).")
    if event.what == "load":
        return ("A kernel first used inside the loop was loaded then (CUDA's lazy module loading): once per run, "
                "so measure after a warm-up that runs every shape (every expert size, every sequence bucket), or set "
                "`CUDA_MODULE_LOADING=EAGER` to load all modules at start-up.")
    if fw.name == "jax":
        return ("jax.jit compiled again for a new input shape or static argument: pad inputs to a few fixed shapes "
                "(buckets) and warm each up before the loop, keep `static_argnums` values fixed; `JAX_LOG_COMPILES=1` "
                "(or `jax.config.update('jax_log_compiles', True)`) names the function and the shapes.")
    if fw.is_torch and fw.compiled:
        return ("torch.compile recompiled for a new input shape: mark the changing dimension dynamic before the "
                "first call (`torch._dynamo.mark_dynamic(x, dim)`) or compile with `dynamic=True`, or pad to a few "
                "lengths and warm each up before the loop; `TORCH_LOGS=recompiles` names the guard that failed.")
    if event.library == "gemm":
        return ("A matrix shape first seen here made the GEMM library pick and load a new kernel (MoE routing and "
                "variable batch or sequence sizes meet new shapes): warm up with every shape the loop will see "
                "before measuring, or pad to a few sizes (expert capacity, sequence buckets).")
    if fw.is_torch:
        return ("A new shape made PyTorch build new kernels (cuDNN's runtime-fused attention or convolution "
                "autotuning with `torch.backends.cudnn.benchmark`): keep shapes static (a static KV cache, padding to "
                "buckets) and warm up every shape before the loop, or use a backend without runtime compilation "
                "(`torch.backends.cuda.enable_cudnn_sdp(False)`).")
    return ("Modules are compiled or loaded inside the loop (NVRTC, cuModuleLoad): compile and load every module "
            "at start-up and keep the handles; for plain lazy loading `CUDA_MODULE_LOADING=EAGER` moves the loads "
            "to start-up.")


RULE = Recompile
