"""What sets a regime of steps apart from the steady ones: the per-step facts a person can act on.

A run of steps that is slower (or faster) than the steady run differs in something the trace
records: code built in every step (module loads: cuDNN runtime fusion for a new shape, Triton or
torch.compile recompiling), CUDA graphs captured again, the allocator growing, more kernels per
step (autotuning tries candidates), or simply more host time between launches. Each regime gets
the difference that explains most of its extra time, in words and numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_rules.analysis.intervals import point_in
from nsys_rules.analysis.names import ALLOC_APIS, MODULE_LOADS, in_set
from nsys_rules.analysis.taxonomy import base_name
from nsys_rules.model.activity import KERNEL, GpuOps, gpu_ops
from nsys_rules.model.trace import Trace

#: Calls that capture or instantiate a CUDA graph: done again inside the loop, a re-capture.
GRAPH_CAPTURE_APIS = frozenset({
    "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaGraphInstantiate", "cudaGraphInstantiateWithFlags",
    "cudaGraphInstantiateWithParams", "cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiate",
    "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
})
_ALLOCATING = frozenset(name for name in ALLOC_APIS if "Free" not in name and "Destroy" not in name
                        and "Release" not in name and "Unregister" not in name and "Unmap" not in name)


#: A step holding module loads that lasts this many median steps is a compile, never the loop's pattern.
COMPILE_STEPS = 10.0


def compiles_only(durations: np.ndarray, median: float, count: int) -> bool:
    """Whether steps that load code (``durations``) are a few compiles: each one many median steps long.

    A torch.compile loop over rotating shapes recompiles in its first few measured steps, seconds
    each; loads spread over many usual-length steps are the loop's pattern (module-loading's).
    """
    return bool(len(durations)) and 2 * len(durations) <= count and bool(np.all(durations > COMPILE_STEPS * median))


def step_lengths(gpu_durations: np.ndarray, host: np.ndarray) -> np.ndarray:
    """Each steady step's GPU length, the first one's host length when that is a compile (over
    :data:`COMPILE_STEPS` median steps).

    The steps tile the GPU clock from the first step's first GPU operation, so host time the first
    step spends before it (a recompile of the loop's first measured step, seconds long) is in no
    step's GPU length; later steps' tiles start where their host work did and hold it.
    """
    lengths = np.array(gpu_durations, dtype=np.int64, copy=True)
    if len(lengths) and len(host):
        first = int(host[0, 1] - host[0, 0])
        if first > COMPILE_STEPS * float(np.median(lengths)):
            lengths[0] = max(int(lengths[0]), first)
    return lengths


@dataclass(frozen=True)
class StepFacts:
    """Per-step counts and times inside each step's host interval (arrays of one value per step)."""

    module_loads: np.ndarray  # calls
    module_load_ns: np.ndarray
    graph_captures: np.ndarray  # capture / instantiate calls
    allocations: np.ndarray
    allocation_ns: np.ndarray
    kernels: np.ndarray  # kernel launches
    kernel_ns: np.ndarray  # summed kernel time


def step_facts(trace: Trace, ops: GpuOps, host: np.ndarray, pid: int | None) -> StepFacts:
    """The facts of each step (``host``: n x 2 host intervals) of process ``pid`` (None: every process)."""
    n = len(host)
    zeros = np.zeros(n, np.int64)
    loads, load_ns, captures, allocs, alloc_ns = zeros, zeros, zeros, zeros, zeros
    if trace.has("api") and n:
        api = trace.frame("api", ["start", "end", "pid"])
        names = trace.api_names()
        mine = np.ones(len(api), bool) if pid is None else api["pid"].to_numpy() == pid
        starts, ends = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
        loads, load_ns = _per_step(starts, ends, in_set(names, MODULE_LOADS) & mine, host)
        captures, _ = _per_step(starts, ends, in_set(names, GRAPH_CAPTURE_APIS) & mine, host)
        allocs, alloc_ns = _per_step(starts, ends, in_set(names, _ALLOCATING) & mine, host)
    kernels, kernel_ns = _kernels_per_step(ops, host, pid)
    return StepFacts(loads, load_ns, captures, allocs, alloc_ns, kernels, kernel_ns)


#: Operations counted into steps this many at a time: the launch times, step indices and durations of a
#: chunk, not of every kernel of a long capture at once (issue 39: ~40 bytes per kernel at this rule's peak).
OPS_CHUNK = 1 << 20


def _kernels_per_step(ops: GpuOps, host: np.ndarray, pid: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Kernels launched inside each step's host interval (of process ``pid``), and their summed GPU time.

    The sums are float64 per chunk, added up: whole nanoseconds below 2**53, so exactly what one
    ``bincount`` over every kernel gives.
    """
    n = len(host)
    kernels = np.zeros(n, np.int64)
    kernel_ns = np.zeros(n, np.float64)
    if not n:
        return kernels, kernel_ns.astype(np.int64)
    for lo in range(0, len(ops), OPS_CHUNK):
        part = slice(lo, lo + OPS_CHUNK)
        launch = ops.launch[part]
        kernel = (ops.kind[part] == KERNEL) & (launch >= 0)
        if pid is not None:
            kernel &= ops.pid[part] == pid
        index = point_in(launch[kernel], host[:, 0], host[:, 1])
        held = index >= 0
        kernels += np.bincount(index[held], minlength=n)
        kernel_ns += np.bincount(index[held], weights=(ops.end[part] - ops.start[part])[kernel][held], minlength=n)
    return kernels, kernel_ns.astype(np.int64)


def _per_step(starts: np.ndarray, ends: np.ndarray, mask: np.ndarray, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Calls (of ``mask``) starting inside each step, and their summed duration."""
    index = point_in(starts[mask], host[:, 0], host[:, 1])
    held = index >= 0
    count = np.bincount(index[held], minlength=len(host))
    ns = np.bincount(index[held], weights=(ends - starts)[mask][held], minlength=len(host)).astype(np.int64)
    return count, ns


def regime_cause(facts: StepFacts, regime: slice, steady: slice, step_ns: np.ndarray) -> str:
    """Why the steps of ``regime`` differ from the ``steady`` ones, from the facts (one phrase with numbers).

    The cause is the difference of the median step that accounts for the regime's extra time:
    graph captures, module loads (code built every step), allocations, extra kernels or kernel
    time; otherwise the time is host time between launches. A one-off event in one step of the
    regime (the first graph capture) is not its cause: the median step does not hold it.
    """
    def per_step(values: np.ndarray, part: slice) -> float:
        return float(np.median(values[part])) if len(values[part]) else 0.0

    extra = per_step(step_ns, regime) - per_step(step_ns, steady)
    slower = extra > 0
    ms = abs(extra) / 1e6
    if not slower:
        return f"faster steps ({ms:.2f} ms a step less than the steady ones)"
    if per_step(facts.graph_captures, regime) > 0 and per_step(facts.graph_captures, steady) == 0:
        return f"CUDA graphs captured again in every step (+{ms:.2f} ms a step)"
    loads = per_step(facts.module_loads, regime) - per_step(facts.module_loads, steady)
    if loads > 0:
        load_ms = per_step(facts.module_load_ns, regime) / 1e6
        return (f"GPU code built or loaded in every step ({loads:.0f} module load(s) a step, {load_ms:.2f} ms in the "
                f"load calls): new kernels built for new shapes (runtime fusion, JIT compilation or autotuning) "
                f"(+{ms:.2f} ms a step)")
    allocs = per_step(facts.allocations, regime) - per_step(facts.allocations, steady)
    if allocs > 0:
        return f"the allocator growing ({allocs:.0f} more allocation(s) a step) (+{ms:.2f} ms a step)"
    kernels = per_step(facts.kernels, regime) - per_step(facts.kernels, steady)
    steady_kernels = max(per_step(facts.kernels, steady), 1.0)
    if kernels >= 0.2 * steady_kernels:
        return (f"{kernels:.0f} more kernel launch(es) a step than the steady steps ({steady_kernels:.0f}): "
                f"autotuning or plan building tries kernels (+{ms:.2f} ms a step)")
    kernel_extra = per_step(facts.kernel_ns, regime) - per_step(facts.kernel_ns, steady)
    if kernel_extra >= 0.5 * extra:
        return f"the same kernels running longer (+{kernel_extra / 1e6:.2f} ms of kernel time a step)"
    return f"more host time between launches (+{ms:.2f} ms a step, the same GPU work)"


def kernels_after(trace: Trace, times: np.ndarray, limit: int = 5) -> list[str]:
    """Distinct base names of the first kernel launched after each of ``times`` (what a load or compile was for)."""
    ops = gpu_ops(trace)
    kernels = ops.kind == KERNEL
    if not kernels.any() or not len(times) or not trace.has("kernels"):
        return []
    launch = ops.launch[kernels]
    rows = ops.table_row[kernels]
    order = np.argsort(launch, kind="stable")
    at = np.searchsorted(launch[order], np.asarray(times))
    at = at[at < len(order)]
    names = trace.frame("kernels", ["name"])["name"]
    out: list[str] = []
    for i in at.tolist():
        label = base_name(str(names.iloc[int(rows[order[i]])]))[:70]
        if label not in out:
            out.append(label)
        if len(out) >= limit:
            break
    return out


def library_of(kernel_names: list[str]) -> str:
    """Which library built or picked the kernels, by their names: ``cudnn``, ``triton``, ``gemm`` or ``""``."""
    text = " ".join(kernel_names).lower()
    if "cudnn" in text:
        return "cudnn"
    if "triton" in text:
        return "triton"
    if any(k in text for k in ("gemm", "nvjet", "xmma", "cutlass", "cublas")):
        return "gemm"
    return ""
