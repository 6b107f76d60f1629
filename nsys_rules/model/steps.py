"""The step model: what one step of the workload's loop is, where each steady step runs.

Every rule and the budget draw per-step numbers from one :class:`StepModel`. Evidence, strongest
first (``source``):

a. ``nvtx``: user NVTX ranges that behave like steps (they repeat, tile the loop and hold its
   GPU launches), numbered names as one (``train_step 3`` -> ``train_step #``), the outermost
   first; library ranges (CUB, NCCL, cuDNN, XLA thunks, ``aten::``...) never qualify;
b. ``marker``: a readback or synchronization once per step (``.item()``, ``block_until_ready()``);
c. ``graph``: one CUDA graph launch, or a regular group of them, per step (graph and node trace
   modes alike): after the markers, since a sync per token is coarser than a token's launches;
d. ``call``: a call that neither waits nor launches, once per step (a stream-ordered allocation,
   an event record, an input copy);
e. ``kernels``: the period of the whole repeating kernel sequence, only when something shows
   that the period is a step and not one layer;
f. a profiler-API capture range (``-c cudaProfilerApi``) bounds the search; steps come from a-e.

Warm-up ends after the last leading step with a module load or a first-use allocation, a
duration unlike the rest, or a lone synchronization (a benchmark's end-of-warm-up barrier).
Steps are projected onto the GPU clock: a step's GPU work runs from the first to the last GPU
operation launched inside its host interval, and the steps tile the loop's GPU time from the
first operation of one step to the first of the next. Without evidence, ``source`` is ``none``
and ``reason`` says why: never a guessed per-layer step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import COLUMNS as ACTIVITY_COLUMNS
from nsys_rules.model.activity import GpuOps, gpu_ops
from nsys_rules.analysis.intervals import point_in, rising, runs_in
from nsys_rules.analysis.names import PROFILER_START_APIS, PROFILER_STOP_APIS, in_set
from nsys_rules.model.step_detectors import graph_steps, marker_steps
from nsys_rules.model.step_nvtx import nvtx_steps
from nsys_rules.model.step_runs import Bound, Found
from nsys_rules.analysis.regimes import MIN_RUN, regimes, steady_regime
from nsys_rules.model.regime_causes import regime_cause, step_facts
from nsys_rules.model.step_calls import call_steps
from nsys_rules.model.step_period import kernel_steps
from nsys_rules.model.warmup import earlier_runs, warmup_steps


@dataclass(frozen=True)
class SteadyOptions:
    """Knobs of step detection (``[tool.nsys-rules] steady-ranges``)."""

    range_names: tuple[str, ...] = ()  # preferred step range names, tried first
    min_repeats: int = 3
    warmup_tolerance: float = 0.25  # a leading step differing by more than this from the later ones is warm-up


DEFAULT_STEADY = SteadyOptions()

#: Fewest steps, and least GPU work in them, that make a loop when no user range marks the steps.
MIN_LOOP_STEPS = 5
MIN_LOOP_GPU_NS = 1_000_000


@dataclass(frozen=True)
class Regime:
    """A run of consecutive steps at one pace (:mod:`nsys_rules.analysis.regimes`).

    ``first`` counts the loop's steps after warm-up from 0; the steady regime's steps are the
    model's steps, the others are left out of every per-step figure, with ``cause`` saying why
    they differ.
    """

    first: int
    count: int
    median_ns: int
    steady: bool
    cause: str = ""

    def to_json(self) -> dict[str, object]:
        """The regime as the JSON's ``window.steady.regimes`` entries have it."""
        return {"first_step": self.first + 1, "steps": self.count, "median_step_ns": self.median_ns,
                "steady": self.steady, "cause": self.cause}


@dataclass(frozen=True, eq=False)
class StepModel:
    """The steady steps of one trace.

    ``host`` holds each steady step's host interval (n x 2, ns), ``gpu_work`` the first start and
    last end of the GPU work launched inside it (-1 when none), and ``gpu`` the step's share of
    the loop's GPU time: from its first operation to the next step's first (the last step: to
    its last operation's end), so consecutive steps tile the loop without gaps.
    """

    source: str
    description: str
    name: str | None = None
    host: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))
    gpu_work: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))
    gpu: np.ndarray = field(default_factory=lambda: np.empty((0, 2), np.int64))
    pid: int | None = None
    device: int | None = None
    warmup: int = 0
    profiler_range: tuple[int, int] | None = None
    reason: str = ""
    #: The loop's streams on its device: those with work in at least half of the steps.
    streams: tuple[int, ...] = ()
    #: Runs of steps at clearly different paces (after warm-up), the steady one among them; empty when one pace.
    regimes: tuple["Regime", ...] = ()

    @property
    def count(self) -> int:
        """Number of steady steps."""
        return len(self.host)

    @property
    def host_span(self) -> tuple[int, int] | None:
        """First and last host instant of the steady steps."""
        return (int(self.host[0, 0]), int(self.host[-1, 1])) if self.count else None

    @property
    def gpu_span(self) -> tuple[int, int] | None:
        """First and last GPU instant of the steady steps' work."""
        return (int(self.gpu[0, 0]), int(self.gpu[-1, 1])) if self.count else None

    @property
    def gpu_durations(self) -> np.ndarray:
        """Each step's length on the GPU clock."""
        return self.gpu[:, 1] - self.gpu[:, 0]


def step_model(trace: Trace, options: SteadyOptions = SteadyOptions()) -> StepModel:
    """The trace's step model (computed once per trace and options)."""
    return trace.memo(("steps.step_model", options), lambda: _model(trace, options))


def model_needs(trace: Trace) -> dict[str, tuple[str, ...]]:
    """Tables and columns the step model and the budget read (those the trace has)."""
    wanted = dict(ACTIVITY_COLUMNS)
    wanted["nvtx"] = ("start", "end", "name", "pid", "tid", "domain_id", "event_type")
    return {table: cols for table, cols in wanted.items() if trace.has(table)}


def restrict(model: StepModel, keep: np.ndarray) -> StepModel:
    """The model with only the steps where ``keep`` is true (a user's time or NVTX filter)."""
    if keep.all():
        return model
    host, work = model.host[keep], model.gpu_work[keep]
    return dataclasses.replace(model, host=host, gpu_work=work, gpu=_tile(work, host),
                               description=f"{model.description}; {int(keep.sum())} of them inside the filter")


def profiler_range(trace: Trace) -> tuple[int, int] | None:
    """The profiler-API capture range: the first start call to the last stop call after it (or the capture end)."""
    if not trace.has("api"):
        return None
    api = trace.frame("api", ["start", "end", "name"])
    names = trace.api_names()
    starts = api["start"].to_numpy()[in_set(names, PROFILER_START_APIS)]
    if not len(starts):
        return None
    begin = int(starts.min())
    stops = api["start"].to_numpy()[in_set(names, PROFILER_STOP_APIS)]
    later = stops[stops > begin]
    return begin, int(later.max()) if len(later) else capture_end(trace)


def capture_end(trace: Trace) -> int:
    """The last timestamp of GPU or API activity (0 for an empty trace)."""
    ops = gpu_ops(trace)
    last = int(ops.end.max()) if len(ops) else 0
    if trace.has("api"):
        api = trace.frame("api", ["start", "end", "name"])
        if len(api):
            last = max(last, int(api["end"].max()))
    return last


def _model(trace: Trace, options: SteadyOptions) -> StepModel:
    ops = gpu_ops(trace)
    prange = profiler_range(trace)
    lo, hi = prange if prange else (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
    bound = Bound(lo, hi, options.min_repeats, options.range_names)
    reasons = []
    # The coarsest mark that tiles the loop wins: a user's range, then a readback or sync once per
    # step, then a group of graph launches, then a bookkeeping call once per step, then the period of
    # the kernel sequence. A sync per token is coarser than the several graph launches a token makes.
    for detect in (nvtx_steps, marker_steps, graph_steps, call_steps, kernel_steps):
        found = detect(trace, ops, bound)
        if isinstance(found, Found):
            model = _finish(trace, ops, found, prange, options)
            if isinstance(model, StepModel):
                return model
            found = model
        reasons.append(found)
    where = "inside the profiler API capture range" if prange else "in the trace"
    reason = f"no step model fits {where}: " + "; ".join(dict.fromkeys(reasons))
    return StepModel("none", reason, profiler_range=prange, reason=reason)


def _finish(trace: Trace, ops: GpuOps, found: Found, prange: tuple[int, int] | None,
            options: SteadyOptions) -> StepModel | str:
    """The model from the steps a detector found, or why they are no loop (too little repeated work)."""
    host = found.host.astype(np.int64)
    work, device, streams, launches = _project(ops, host, found.pid)
    separate = 0 if prange else earlier_runs(host, found.source, launches)
    host, work = host[separate:], work[separate:]
    dropped, why = warmup_steps(trace, found, host, options.min_repeats)
    if separate:
        why = "an earlier, separate run" + (f" and {why}" if why else "")
    host, work = host[dropped:], work[dropped:]
    dropped += separate
    gpu = _tile(work, host)
    found_regimes: tuple[Regime, ...] = ()
    runs = regimes(gpu[:, 1] - gpu[:, 0])
    if len(runs) > 1:
        found_regimes, keep = _regimes(trace, ops, found, host, gpu, runs, options)
        host, work = host[keep], work[keep]
        gpu = _tile(work, host)
    little = _too_little(found, work)
    if little:
        return little
    words = {"nvtx": f"NVTX range '{found.name}'", "graph": "one CUDA graph launch per step",
             "marker": f"a {found.name} once per step", "call": f"a {found.name} call once per step",
             "kernels": f"the kernel sequence repeating {found.name}"}
    if found.source == "graph" and found.note:  # several launches a step: " (17 graph launches per step)"
        words["graph"] = f"a group of {found.note.strip(' ()').split(' graph')[0]} CUDA graph launches per step"
    text = f"{words[found.source]}, {len(host)} steps"
    if dropped:
        text += f" after {dropped} warm-up step(s) ({why})"
    if prange:
        text = "profiler API capture range; " + text
    if found.source == "nvtx" and found.note:
        text += found.note
    for regime in found_regimes:
        if not regime.steady:
            text += (f"; {regime.count} steps ({regime.first + 1}-{regime.first + regime.count} after warm-up) at "
                     f"{regime.median_ns / 1e6:.2f} ms left out: {regime.cause}")
    return StepModel(found.source, text, found.name, host, work, gpu, found.pid, device, dropped, prange,
                     streams=streams, regimes=found_regimes)


def _too_little(found: Found, work: np.ndarray) -> str:
    """Why the steps a mark cuts are no loop worth a step model, or an empty string.

    A user's step range says what a step is, however small. An inferred mark (a sync, a graph
    launch, a call, a kernel period) needs :data:`MIN_LOOP_STEPS` steps holding at least
    :data:`MIN_LOOP_GPU_NS` of GPU work in all: a model upload's copies and a one-off forward
    repeat a little, but they are no loop, and per-step judgements of them mislead.
    """
    if found.source == "nvtx":
        return ""
    some = work[:, 1] >= 0
    gpu_ns = int((work[some, 1] - work[some, 0]).sum())
    if len(work) < MIN_LOOP_STEPS or gpu_ns < MIN_LOOP_GPU_NS:
        return (f"{found.name} repeats {len(work)} time(s) over {gpu_ns / 1e6:.2f} ms of GPU work: too little "
                "repeated work for a loop")
    return ""


def _regimes(trace: Trace, ops: GpuOps, found: Found, host: np.ndarray, gpu: np.ndarray, runs: list[tuple[int, int]],
             options: SteadyOptions) -> tuple[tuple[Regime, ...], slice]:
    """The regimes of the steps after warm-up, each with its cause, and the steady one's steps (the last long run)."""
    keep = steady_regime(runs, max(options.min_repeats, MIN_RUN))
    durations = gpu[:, 1] - gpu[:, 0]
    facts = step_facts(trace, ops, host, found.pid)
    steady = slice(*runs[keep])
    out = tuple(Regime(first, stop - first, int(np.median(durations[first:stop])), i == keep,
                       "" if i == keep else regime_cause(facts, slice(first, stop), steady, durations))
                for i, (first, stop) in enumerate(runs))
    return out, steady


def _project(ops: GpuOps, host: np.ndarray, pid: int | None
             ) -> tuple[np.ndarray, int | None, tuple[int, ...], np.ndarray]:
    """First start and last end of the loop's GPU work launched in each step, its device and streams,
    and the number of GPU operations of the process launched inside each step.

    The loop's work is that of its process on its busiest device, on the streams that work in at
    least half of the steps: a side stream that runs once every few steps (a background copy)
    runs when it was launched, often long before the step's own kernels, and must not move the
    step's start on the GPU clock.
    """
    index = _step_index(ops, host, pid)
    held = index >= 0
    step = index[held]  # the held operations' steps, selected once and reused while the selection holds
    launches = np.bincount(step, minlength=len(host))
    work = np.full((len(host), 2), -1, np.int64)
    if not held.any():
        return work, None, (), launches
    if ops.device.strides == (0,):  # one GPU ran everything (loaders.columns.one_value): no sort, no mask
        device = int(ops.device[0])
    else:
        devices, inverse = np.unique(ops.device[held], return_inverse=True)
        busy = np.bincount(inverse, weights=ops.duration[held])
        device = int(devices[np.argmax(busy)])
        held &= ops.device == device
        step = index[held]
    streams = loop_streams(ops.stream[held], step, len(host), lambda: ops.duration[held])
    held &= ops.on_streams(streams)
    first = np.full(len(host), np.iinfo(np.int64).max, np.int64)
    last = np.full(len(host), -1, np.int64)
    np.minimum.at(first, index[held], ops.start[held])
    np.maximum.at(last, index[held], ops.end[held])
    some = last >= 0
    work[some, 0], work[some, 1] = first[some], last[some]
    return work, device, streams, launches


def _step_index(ops: GpuOps, host: np.ndarray, pid: int | None) -> np.ndarray:
    """The step (row of ``host``) each operation of the process was launched in, -1 for none."""
    launch = ops.launch
    one_process = pid is None or (ops.pid.strides == (0,) and len(ops) and int(ops.pid[0]) == pid)
    if one_process and rising(launch):
        # Launch order is row order (one launching thread, work run in launch order): each step's operations
        # are one run of rows, written as marks at the runs' ends summed along the rows: no search per operation.
        known = int(np.searchsorted(launch, 0, side="left"))  # unknown launches (-1) come first
        first, upto = runs_in(launch[known:], host[:, 0], host[:, 1])
        some = np.flatnonzero(upto > first)
        index = np.zeros(len(ops) + 1, np.int64)
        np.add.at(index, first[some] + known, some + 1)
        np.add.at(index, upto[some] + known, -(some + 1))
        np.cumsum(index, out=index)
        index -= 1
        return index[:-1]
    mine = launch >= 0
    if pid is not None:
        mine &= ops.pid == pid
    index = np.full(len(ops), -1, np.int64)
    index[mine] = point_in(launch[mine], host[:, 0], host[:, 1])
    return index


def loop_streams(stream: np.ndarray, step: np.ndarray, steps: int,
                 duration: Callable[[], np.ndarray]) -> tuple[int, ...]:
    """Streams with work in at least half of the steps (else the busiest one: ``duration`` gives the
    operations' durations, computed only then)."""
    out = []
    values = np.sort(pd.unique(stream))  # the distinct streams by hash: no sort of a million rows
    for s in values:
        # Distinct steps of the stream by a count per step (steps are 0..steps-1): no sort of a million rows.
        of_stream = step if len(values) == 1 else step[stream == s]
        if np.count_nonzero(np.bincount(of_stream, minlength=steps)) >= 0.5 * steps:
            out.append(int(s))
    if not out and len(stream):
        values, inverse = np.unique(stream, return_inverse=True)
        out = [int(values[np.argmax(np.bincount(inverse, weights=duration()))])]
    return tuple(out)


def _tile(work: np.ndarray, host: np.ndarray) -> np.ndarray:
    """Steps tiling the loop's GPU time: each runs from its boundary to the next step's.

    A step's boundary lies between the end of the previous step's GPU work and the start of its
    own, at the moment the host began the step when that falls in between: idle time before the
    host started the step belongs to the step before (its host work: sampling, a sync), idle time
    after belongs to the step (launching, waiting behind other work). A host running ahead puts
    the boundary at the previous step's end.
    """
    n = len(work)
    if not n:
        return np.empty((0, 2), np.int64)
    first = work[:, 0].astype(np.int64).copy()
    last = work[:, 1].astype(np.int64).copy()
    # A step without GPU work takes no GPU time: it starts where the next one starts.
    for i in range(n - 2, -1, -1):
        if first[i] < 0:
            first[i], last[i] = first[i + 1], max(last[i], -1)
    if first[-1] < 0:
        first[-1] = max(int(last.max()), int(first.max()), 0)
    prev_end = np.maximum.accumulate(np.maximum(last, first))
    bounds = first.copy()
    bounds[1:] = np.clip(host[1:, 0], np.minimum(prev_end[:-1], first[1:]), first[1:])
    bounds = np.maximum.accumulate(np.maximum(bounds, 0))
    ends = np.append(bounds[1:], max(int(last.max()), int(bounds[-1])))
    return np.stack([bounds, ends], axis=1)


