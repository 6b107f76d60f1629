"""step-outliers: steady steps much slower than the median, and what overlapped them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.api import (Budget, Finding, Framework, human_bytes, KERNEL, LABELS, Location, MEMCPY, MEMSET, metric,
                            MissingData, pct, Renamed, REPLAY, Rule, RuleContext, Severity, step_kinds, StepKind)
from nsys_rules.api.analysis import (ALLOC_APIS, base_name, category_codes, MODULE_LOADS, point_in, rows_with_codes,
                                     SYNC_APIS)

_COPY_KINDS = {1: "host-to-device", 2: "device-to-host", 8: "device-to-device", 10: "peer-to-peer"}


@dataclass(frozen=True)
class Options:
    """Options of step-outliers."""

    slow_ratio: float = field(default=1.5, metadata={"help": "a step slower than this times the median step is slow"})
    tail_ratio: float = field(default=1.3, metadata={
        "help": "also judge when p99/p50 of the step time exceeds this: steps over it are then slow"})
    outlier_mads: float = field(default=6.0, metadata={
        "help": "a step this many median absolute deviations (scaled to a standard deviation) above the median is "
                "slow too, when it is also min_excess_pct slower: in a steady loop a periodic side job stands out "
                "long before 1.5x"})
    min_excess_pct: float = field(default=10.0, metadata={
        "help": "the least excess over the median, in percent, for a step to count as slow by deviation",
        "max_pct": None})  # an excess, not a share: 150 % is a step 2.5 times the median
    min_steps: int = field(default=8, metadata={"help": "fewest steady steps to judge outliers against a median"})
    warn_share_pct: float = field(default=5.0, metadata={
        "help": "percent of the steady state that the slow steps' excess over the median must reach for a warning"})
    listed: int = field(default=4, metadata={"help": "slow steps named one by one in the message"})


@dataclass(frozen=True)
class Cause:
    """Why the slow steps are slow, with the words and the budget parts that grew."""

    kind: str  # contention, module loading, allocation, synchronization, host, kernels
    text: str  # the words, then the budget parts that grew
    parts: tuple[str, ...]
    other_process: bool = False  # contention from another process's GPU work (not this program's other streams)


def slow_steps(step_ns: np.ndarray, slow_ratio: float, tail_ratio: float, outlier_mads: float = 6.0,
               min_excess_pct: float = 10.0) -> tuple[np.ndarray, float]:
    """Indices of the slow steps and the threshold used (ns).

    Slow: over ``slow_ratio`` x the median; or over ``tail_ratio`` x the median when p99/p50 exceeds
    it; or, at least ``min_excess_pct`` over the median, ``outlier_mads`` robust deviations above it
    (1.4826 x the median absolute deviation estimates a standard deviation).
    """
    p50 = float(np.median(step_ns))
    p99 = float(np.quantile(step_ns, 0.99))
    limit = slow_ratio * p50
    if p50 > 0 and p99 / p50 > tail_ratio:
        limit = min(limit, tail_ratio * p50)
    spread = 1.4826 * float(np.median(np.abs(step_ns - p50)))
    by_deviation = max(p50 + outlier_mads * spread, p50 * (1 + min_excess_pct / 100))
    limit = min(limit, by_deviation)
    return np.flatnonzero(step_ns > limit), limit


def part_growth(budget: Budget, steps: np.ndarray) -> dict[str, int]:
    """How much each budget part grew in ``steps`` over its median step value, summed."""
    out = {}
    for name, values in budget.per_step.items():
        grown = int((values[steps] - np.median(values)).clip(min=0).sum())
        if grown > 0:
            out[name] = grown
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


class StepOutliers(Rule):
    """Steady steps much slower than the median step, each attributed to what overlapped it.

    What it detects: steps of the steady state (see the step model) whose time on the loop's GPU
    exceeds `slow_ratio` x the median, or, when p99/p50 of the step time exceeds `tail_ratio`, the
    steps over that ratio, or steps that stand `outlier_mads` robust deviations above an otherwise
    steady median (and at least `min_excess_pct` above it). For the slow steps it compares every budget part with its median and
    looks at what overlapped them: other streams' or processes' GPU work (contention: which stream,
    which operation, how many bytes), module loading, allocation, synchronization, host time, and
    kernels seen for the first time in the loop. Steps of another kind (a kernel count well apart from
    the usual step's, the same in each, recurring: a prefill among decode steps, an optimizer step
    after gradient-accumulation micro-steps) are never outliers: each kind is named with its count,
    kernels, median and share of the steady state, and outliers are judged within the usual kind.
    Why it hurts: latency-sensitive serving pays for the slowest steps (p99 time per output token);
    a periodic side job or a lazy load in the loop hides in averages.
    Evidence: step time p50/p99/max, the slow steps (count, which, how slow), their excess over
    the median, the budget parts that grew, and the overlapping work.
    Next optimizations: contention: run side copies on a low-priority stream, in smaller chunks,
    or where the loop idles; another process's work on the GPU: a GPU of its own, scheduling it
    outside this run, or MPS with limits (stream priorities do not reach another process); module
    loading and new kernels: warm up every shape before measuring,
    `CUDA_MODULE_LOADING=EAGER`; allocation: allocate before the loop; host stalls: find the host
    code at those steps (garbage collection, logging, scheduling).
    Options: `slow_ratio`, `tail_ratio`, `outlier_mads`, `min_excess_pct`, `min_steps`, `warn_share_pct`, `listed`.
    Requires: a step model (steady steps) and the GPU tables; the API table for host causes.
    False positives: steps that legitimately do more work (a growing sequence, a different batch)
    are slow by design; the cause then reads "kernels ran longer".
    """

    name = "step-outliers"
    title = "Steps much slower than the median step"
    default_severity = Severity.WARNING
    requires = ()
    optional = ("kernels", "memcpy", "memset", "graph_trace", "api")
    # The GPU tables are read through the shared activity table (nsys_rules.model.activity); only the
    # columns named here are added for this rule's own look-ups.
    columns = {"api": ("start", "end", "name", "pid", "tid"), "memcpy": ("start", "end", "bytes", "copy_kind"),
               "kernels": ("start", "end", "name"), "memset": ("start", "end"), "graph_trace": ("start", "end")}
    window = "steady"
    Options = Options
    needs_release_build = True  # tunes measured kernel/host times: a debug build's are not the program's
    renamed_options = {"warn_share": Renamed("warn_share_pct")}

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opts = ctx.options
        budget, model = ctx.budget, ctx.steps
        if budget is None or model is None:
            reason = ctx.window.model.reason if ctx.window.model is not None else ""
            raise MissingData(f"no steady steps to compare ({reason or 'no step model'})",
                              "mark the loop's steps with an NVTX range (`nvtx.range('step')`), or capture with "
                              "`-c cudaProfilerApi` around the loop")
        if budget.steps < opts.min_steps:
            return
        durations = budget.step_ns
        judged = np.arange(len(durations))
        kinds = _kinds(ctx, durations)
        if kinds:
            # Steps of another kind are the loop's design, never outliers: each kind is named with its numbers,
            # and outliers are judged among the usual kind's steps only.
            yield _kinds_finding(ctx, kinds, budget.total_ns)
            judged = kinds[0].steps
        found, limit = slow_steps(durations[judged], opts.slow_ratio, opts.tail_ratio, opts.outlier_mads,
                                  opts.min_excess_pct)
        slow = judged[found]
        if not len(slow):
            return
        p50 = float(np.median(durations[judged]))
        excess = int((durations[slow] - p50).clip(min=0).sum())
        growth = part_growth(budget, slow)
        cause = self._cause(ctx, slow, growth)
        share = pct(excess, budget.total_ns)
        severity = Severity.WARNING if share >= opts.warn_share_pct else Severity.INFO
        shown = slow[np.argsort(-durations[slow], kind="stable")][:opts.listed]
        listed = ", ".join(f"step {i + 1} {durations[i] / 1e6:.2f} ms" for i in shown)
        period = _period(slow)
        rhythm = f" (every {period} steps)" if period else ""
        grew = ", ".join(f"{LABELS.get(k, k)} +{v / 1e6:.2f} ms" for k, v in list(growth.items())[:3])
        of = f"{budget.steps} steady steps" if not kinds else f"{len(judged)} steady steps of the usual kind"
        message = (f"{len(slow)} of {of}{rhythm} took over {limit / p50:.2f}x the median "
                   f"step ({p50 / 1e6:.3f} ms): {listed}. Together they run {excess / 1e6:.2f} ms over the median "
                   f"({share:.1f} % of the {budget.total_ns / 1e6:.1f} ms steady state); what grew: {grew}. "
                   f"{cause.text}")
        metrics = {"slow_steps": metric(len(slow), "count"), "steps": metric(budget.steps, "count"),
                   "step_p50": metric(p50, "ns"), "step_p99": metric(float(np.quantile(durations, 0.99)), "ns"),
                   "step_max": metric(int(durations.max()), "ns"), "excess_time": metric(excess, "ns")}
        advice = _advice(cause.kind, ctx.framework, cause.other_process)
        yield ctx.finding(message, advice, severity=severity, metrics=metrics,
                          location=Location(device=budget.device, start_ns=int(model.gpu[int(slow[0]), 0]),
                                            end_ns=int(model.gpu[int(slow[-1]), 1]),
                                            steps=tuple(int(i) + 1 for i in shown)),
                          estimated_savings_ns=excess, budget_part="+".join(cause.parts) or None, key=cause.kind)

    def _cause(self, ctx: RuleContext, slow: np.ndarray, growth: dict[str, int]) -> Cause:
        """The cause whose budget parts grew most in the slow steps (sizes decide, evidence words it)."""
        parts = tuple(growth)
        sized: dict[str, int] = {}
        for part, ns in growth.items():
            kind = _PART_CAUSE.get(part, "" if part in _NO_CAUSE else "kernels")
            if kind:
                sized[kind] = sized.get(kind, 0) + ns
        kind = max(sized, key=lambda k: (sized[k], -_CAUSE_ORDER.index(k))) if sized else "kernels"
        grew = f" (+{sized.get(kind, 0) / 1e6:.2f} ms)"
        host = _host_calls(ctx, slow) if kind in ("module loading", "allocation", "synchronization") else {}
        other = _other_work(ctx, slow) if kind in ("kernels", "contention") else None
        if kind == "kernels" and other is not None and other[0] >= 0.25 * max(sum(growth.values()), 1):
            kind, grew = "contention", f" (+{sum(growth.values()) / 1e6:.2f} ms)"  # time-sliced by the other work
        if kind == "contention":
            what = other[1] if other is not None else "other streams or processes used the GPU while the loop idled"
            return Cause(kind, f"Other work ran on the GPU during those steps{grew}: {what}.", parts, " of process " in what)
        if kind == "module loading":
            loads, new = host.get("module", (0, 0)), _first_seen(ctx, slow)
            bits = ([f"{loads[0]} module load call(s) ({loads[1] / 1e6:.2f} ms)"] if loads[0] else []) + \
                ([f"kernels never launched before in the loop: {new}"] if new else [])
            return Cause(kind, f"Module loading in those steps{grew}: " + ("; ".join(bits) or "the GPU waited on it")
                         + " (lazy loading and first-use setup of new kernels or shapes).", parts)
        if kind in ("allocation", "synchronization"):
            n, ns = host.get("alloc" if kind == "allocation" else "sync", (0, 0))
            calls = f": {n} call{'' if n == 1 else 's'}, {ns / 1e6:.2f} ms" if n else ""
            return Cause(kind, f"{kind.capitalize()} in those steps{grew}{calls}.", parts)
        if kind == "host":
            return Cause(kind, f"The GPU waited for the host in those steps{grew}: host code between launches "
                               "and between steps took longer.", parts)
        return Cause("kernels", f"Their kernels ran longer in those steps{grew}: more work, or slower kernels.", parts)


#: The cause each idle budget part points to (busy parts other than ``contention``: kernels).
_PART_CAUSE = {"contention": "contention", "module_loading": "module loading", "allocation": "allocation",
               "after_sync": "synchronization", "launch_wait": "host", "host_prep": "host"}
#: Idle parts that name no cause of their own (dependencies, the inside of graph replays).
_NO_CAUSE = ("graph_internal", "idle_other")
#: Which cause is named when two grew by the same amount.
_CAUSE_ORDER = ("contention", "module loading", "allocation", "synchronization", "host", "kernels")


def _kinds(ctx: RuleContext, durations: np.ndarray) -> list[StepKind]:
    """The steady steps' kinds by kernel count (:func:`~nsys_rules.api.step_kinds`); empty when one kind."""
    model = ctx.steps
    if model is None or model.count != len(durations):
        return []
    facts = ctx.step_facts(model.host, model.pid)
    return step_kinds(facts.kernels, durations, (facts.module_loads > 0) | (facts.graph_captures > 0))


def _kinds_finding(ctx: RuleContext, kinds: list[StepKind], total_ns: int) -> Finding:
    """An information finding naming each kind of step with its count, median and share of the steady state."""
    usual, other = kinds[0], kinds[1]
    more = "more" if other.kernels > usual.kernels else "fewer"
    message = (f"The loop runs steps of two kinds, told apart by their kernel count: {usual.describe(total_ns)}; and "
               f"{other.describe(total_ns)} ({more} kernels: a prefill among decode steps, an optimizer step after "
               "gradient-accumulation micro-steps, an evaluation step). Each kind is judged on its own; steps of the "
               "second kind are not outliers.")
    metrics = {"kinds": metric(len(kinds), "count"),
               "usual_steps": metric(len(usual.steps), "count"), "usual_median": metric(usual.median_ns, "ns"),
               "usual_kernels": metric(usual.kernels, "count"), "other_steps": metric(len(other.steps), "count"),
               "other_median": metric(other.median_ns, "ns"), "other_kernels": metric(other.kernels, "count"),
               "other_time": metric(other.total_ns, "ns")}
    return ctx.finding(message, "Compare each kind with its own median: time per step of the usual kind is the "
                       "loop's pace, the other kind's steps are extra work the loop does by design (for a serving "
                       "loop, chunked prefill spreads it over decode steps).", severity=Severity.INFO,
                       metrics=metrics, location=Location(steps=tuple(int(i) + 1 for i in other.steps[:8])),
                       key="kinds")


def _period(slow: np.ndarray) -> int:
    """The spacing of slow steps when it is regular (a periodic side job), else 0."""
    if len(slow) < 3:
        return 0
    gaps = np.diff(slow)
    return int(gaps[0]) if (gaps == gaps[0]).all() and gaps[0] > 1 else 0


def _other_work(ctx: RuleContext, slow: np.ndarray) -> tuple[int, str] | None:
    """GPU time of other streams' or processes' work overlapping the slow steps, and what it was."""
    model, budget = ctx.steps, ctx.budget
    assert model is not None and budget is not None
    ops = ctx.gpu_ops
    on = (ops.device == budget.device) & ~((ops.pid == budget.pid) & ops.on_streams(budget.loop_streams))
    if not on.any():
        return None
    bounds = model.gpu[slow]
    index = point_in(ops.start[on], bounds[:, 0], bounds[:, 1])
    ends = point_in(ops.end[on], bounds[:, 0], bounds[:, 1])
    hit = (index >= 0) | (ends >= 0)
    if not hit.any():
        return None
    rows = np.flatnonzero(on)[hit]
    total = int(ops.duration[rows].sum())
    stream = int(np.bincount(ops.stream[rows] - ops.stream[rows].min(), weights=ops.duration[rows]).argmax()
                 + ops.stream[rows].min())
    pick = rows[ops.stream[rows] == stream]
    kinds = ops.kind[pick]
    pid = int(ops.pid[pick[0]])
    who = f"stream {stream}" + ("" if pid == budget.pid else f" of process {pid}")
    if (kinds == MEMCPY).any():
        copies = pick[kinds == MEMCPY]
        table = ctx.trace.frame("memcpy", ["bytes", "copy_kind"])
        rows = ops.table_row[copies]
        size = int(table["bytes"].to_numpy()[rows].sum())
        kind = _COPY_KINDS.get(int(table["copy_kind"].to_numpy()[rows[0]]), "memory")
        what = (f"{who} ran {len(copies)} {kind} cop{'y' if len(copies) == 1 else 'ies'} of "
                f"{human_bytes(size / len(copies))} each ({ops.duration[copies].sum() / 1e6:.2f} ms of copy time)")
    elif (kinds == KERNEL).any() or (kinds == REPLAY).any():
        what = f"{who} ran {len(pick)} kernel(s) or graph replay(s) ({ops.duration[pick].sum() / 1e6:.2f} ms)"
    elif (kinds == MEMSET).any():
        what = f"{who} ran {len(pick)} memset(s) ({ops.duration[pick].sum() / 1e6:.2f} ms)"
    else:
        what = f"{who} ran {len(pick)} operation(s)"
    return total, what + "; the loop's streams had no such work in the median step"


def _host_calls(ctx: RuleContext, slow: np.ndarray) -> dict[str, tuple[int, int]]:
    """Module-load, allocation and sync calls of the loop's process inside the slow steps' host time."""
    model = ctx.steps
    assert model is not None
    if not ctx.trace.has("api"):
        return {}
    api = ctx.trace.frame("api", ["start", "end", "name", "pid", "tid"])
    names = ctx.trace.api_names()
    # Each kind judged per distinct name; the API rows scanned once for all three kinds together.
    categories = [str(c) for c in names.cat.categories]
    kinds = {key: np.array([c in members for c in categories] + [False], bool)  # last: code -1 (no name)
             for key, members in (("module", MODULE_LOADS), ("alloc", ALLOC_APIS), ("sync", SYNC_APIS))}
    codes = category_codes(names)
    any_kind = rows_with_codes(codes, np.flatnonzero((kinds["module"] | kinds["alloc"] | kinds["sync"])[:-1]))
    pid = api["pid"].to_numpy()
    if model.pid is not None and pid.strides == (0,):  # one process (loaders.columns.one_value)
        if len(pid) and int(pid[0]) != model.pid:
            any_kind[:] = False
    elif model.pid is not None:
        any_kind &= pid == model.pid
    # Only the calls of these kinds are placed in steps (a few among millions of API rows).
    rows = np.flatnonzero(any_kind)
    del any_kind
    row_codes = codes[rows]
    start, end = api["start"].to_numpy(np.int64)[rows], api["end"].to_numpy(np.int64)[rows]
    hosts = model.host[slow]
    inside = point_in(start, hosts[:, 0], hosts[:, 1]) >= 0
    out = {}
    for key, of_kind in kinds.items():
        sel = inside & of_kind[row_codes]
        out[key] = (int(sel.sum()), int((end[sel] - start[sel]).sum()))
    return out


def _first_seen(ctx: RuleContext, slow: np.ndarray, limit: int = 3) -> str:
    """Kernels launched in a slow step that no earlier step of the loop launched (names, at most ``limit``)."""
    model = ctx.steps
    assert model is not None
    ops = ctx.gpu_ops
    every_symbol = ctx.kernel_symbols  # built (and cached) before this rule's own row arrays
    mine = (ops.kind == KERNEL) & (ops.launch >= 0)
    if model.pid is not None:
        mine &= ops.pid == model.pid
    # Placed in steps on every row (a view, no gathered launch times), then the other rows unset.
    step = point_in(ops.launch, model.host[:, 0], model.host[:, 1])
    np.logical_not(mine, out=mine)
    step[mine] = -1
    del mine
    held = step >= 0
    if not held.any():
        return ""
    symbols, steps_of = every_symbol[held], step[held]
    del step
    # Per symbol (dense codes): its earliest step, and its first row, which orders the names.
    first_step = np.full(int(symbols.max()) + 1, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_step, symbols, steps_of)
    del steps_of  # freed before the row numbers take its place
    first_row = np.full(len(first_step), len(symbols), np.int64)
    np.minimum.at(first_row, symbols, np.arange(len(symbols)))
    seen = np.flatnonzero(first_row < len(symbols))
    seen = seen[np.argsort(first_row[seen], kind="stable")]
    new = seen[np.isin(first_step[seen], slow) & (first_step[seen] > 0)]
    if not len(new):
        return ""
    kernels = ctx.trace.frame("kernels", ["name"])
    rows = ops.table_row[held]
    names: list[str] = []
    for sym in new.tolist():
        row = int(rows[first_row[sym]])
        label = base_name(str(kernels["name"].iloc[row]))[:60]
        if label not in names:
            names.append(label)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _advice(kind: str, fw: Framework, other_process: bool = False) -> str:
    if kind == "contention" and other_process:
        # Stream priorities and chunked copies act inside one program: another process's work is not theirs to order.
        return ("Another process's work shares this GPU during those steps: give the latency-critical job the GPU "
                "alone (another GPU for the other job, `CUDA_VISIBLE_DEVICES`), schedule the other job outside this "
                "one's run, or run both under MPS with limits for the other (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, "
                "`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`); stream priorities inside this program do not reach another "
                "process's work.")
    # Stream priorities in the program's own API (in CUDA and PyTorch alike a lower number is a higher priority).
    low_priority = ("`torch.cuda.Stream(priority=0)` for the side work, `priority=-1` (high) for the loop" if fw.is_torch
                    else "`cudaStreamCreateWithPriority` with the lowest priority (the greatest number)")
    allocation = ("grow PyTorch's caching allocator at start-up (run the largest shapes once in warm-up)" if fw.is_torch
                  else "reserve XLA's memory pool at start-up (the default preallocation, not "
                  "`XLA_PYTHON_CLIENT_PREALLOCATE=false`)" if fw.name == "jax"
                  else "keep a memory pool that holds its memory (`cudaMemPoolAttrReleaseThreshold`)")
    python = fw.name != "cuda" or fw.language == "python"
    host_work = ("garbage collection, logging, scheduling, Python work" if python
                 else "logging, scheduling, I/O, lock waits")
    return {
        "contention": (f"Keep side work off the loop's GPU time: run it on a low-priority stream ({low_priority}), "
                       "split large copies into chunks issued where the loop idles, or move the job to "
                       "another GPU; if another process shares the GPU, give the latency-critical one the GPU alone "
                       "(or MPS limits)."),
        "module loading": ("Warm up every kernel and shape before the measured loop (run each once, e.g. every MoE "
                           "expert size or sequence bucket), or load modules eagerly with `CUDA_MODULE_LOADING=EAGER`; "
                           "pre-tune library heuristics (cuBLASLt, Triton autotuning) at start-up."),
        "allocation": (f"Allocate the buffers those steps need before the loop ({allocation}) so no step pays a "
                       "driver allocation."),
        "synchronization": "Remove the synchronization those steps make, or move it out of the loop.",
        "host": (f"Find the host code that runs in those steps ({host_work}): "
                 "`nsys profile --sample=process-tree --trace=cuda,nvtx,osrt` shows its call stacks; move it "
                 "off the launching thread."),
        "kernels": ("Open the slow steps in the timeline and compare their kernels with a median step: bucket "
                    "variable shapes, balance the work (MoE routing) or see kernel-tail."),
    }[kind]


RULE = StepOutliers
