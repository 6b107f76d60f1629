"""Test helpers for job rules: simulated multi-rank jobs written as real nsys exports.

:func:`write_job` simulates a data-parallel loop (compute, then an all-reduce that ends when
the last rank arrives) and writes one :class:`~nsys_rules.testing.TraceBuilder` export per
rank, or one export holding every rank as its own process and GPU. Lateness, extra compute,
overlapping compute, clock skew and jitter are planted per rank and step, so a test knows the
exact answer::

    paths = write_job(tmp_path, JobPlan(ranks=4, steps=12, stall={2: 3_000_000}))
    findings = run_job_rules(["rank-straggler"], paths)

:func:`run_job_rules` runs job rules the way ``nsys-rules check`` does (per-trace collection,
then the job); it fails the test when a job rule raised, and returns the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from nsys_rules.testing.builder import GpuSpec, TraceBuilder

EPOCH_NS = 1_790_000_000_000_000_000  # a UTC epoch in 2026: session starts are written relative to it


@dataclass(frozen=True)
class JobPlan:
    """A simulated job. Times are ns; per-rank dicts map a rank to a value (absent: 0).

    Each step on each rank: ``launch_gap`` of GPU idle after the previous all-reduce, the compute
    kernel (``compute`` plus ``extra_compute[rank]``, in the steps ``extra_compute_steps[rank]``,
    all steps when absent), then ``stall[rank]`` of GPU idle (a host
    stall, in the steps ``stall_steps[rank]``, all steps when absent), then the all-reduce, which starts
    at the rank's arrival and ends ``transfer`` after the last rank's arrival. ``overlap`` plants a
    compute kernel on another stream at the start of each all-reduce (exposed time = duration
    - overlap). ``jitter`` adds uniform noise in [0, jitter) to each arrival, ``end_jitter`` to each
    rank's all-reduce end (real collectives end a few microseconds apart).
    """

    ranks: int = 2
    steps: int = 10
    compute: int = 2_000_000
    transfer: int = 300_000
    launch_gap: int = 20_000
    overlap: int = 0
    extra_compute: Mapping[int, int] = field(default_factory=dict)
    stall: Mapping[int, int] = field(default_factory=dict)
    stall_steps: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    extra_compute_steps: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    jitter: int = 0
    end_jitter: int = 0
    seed: int = 0
    comm_name: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    clock_skew: Mapping[int, int] = field(default_factory=dict)  # error of each rank's recorded session start
    session_gap: int = 1_300_000  # true session starts: rank r starts r * session_gap after rank 0
    write_session_start: bool = True
    one_trace: bool = False  # all ranks in one export, rank r as process 1000 + r on GPU r
    file_name: str = "node0_rank{rank}_1.sqlite"  # per-rank exports; {rank} and {index} are filled in
    environment_rank: bool = False  # record RANK=<rank> in each export's environment
    #: The profiled command of every rank (its framework shapes the rules' advice: a torch launcher makes it PyTorch).
    command: tuple[str, ...] = ("python", "train.py")


@dataclass(frozen=True)
class Simulated:
    """What the simulation planted, in global time, for the test's hand computations."""

    arrival: np.ndarray  # (steps, ranks)
    end: np.ndarray  # (steps, ranks) all-reduce end
    paths: list[Path]


def simulate(plan: JobPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Compute start and duration, arrival and all-reduce end per (step, rank), in global ns."""
    rng = np.random.default_rng(plan.seed)
    n, s = plan.ranks, plan.steps
    compute_start = np.zeros((s, n), np.int64)
    compute = np.zeros((s, n), np.int64)
    arrival = np.zeros((s, n), np.int64)
    end = np.zeros((s, n), np.int64)
    t = 50_000_000  # every rank is up and running 50 ms after the first session start
    for k in range(s):
        for r in range(n):
            stall = plan.stall.get(r, 0) if r not in plan.stall_steps or k in plan.stall_steps[r] else 0
            jitter = int(rng.integers(0, plan.jitter)) if plan.jitter else 0
            extra = plan.extra_compute.get(r, 0) if r not in plan.extra_compute_steps or k in plan.extra_compute_steps[r] \
                else 0
            compute_start[k, r] = t + plan.launch_gap
            compute[k, r] = plan.compute + extra
            arrival[k, r] = compute_start[k, r] + compute[k, r] + stall + jitter
        end[k] = arrival[k].max() + plan.transfer
        if plan.end_jitter:
            end[k] += rng.integers(0, plan.end_jitter, size=n)
        t = int(end[k].max())
    return compute_start, compute, arrival, end


def write_job(folder: str | Path, plan: JobPlan) -> Simulated:
    """Write the job's exports into ``folder``; returns what was planted and the paths."""
    folder = Path(folder)
    compute_start, compute, arrival, end = simulate(plan)
    n = plan.ranks
    builders: list[tuple[TraceBuilder, int, int, int]] = []  # builder, pid, device, session offset
    if plan.one_trace:
        b = TraceBuilder(command=list(plan.command), gpus=[GpuSpec(id=r) for r in range(n)],
                         session_start_utc_ns=EPOCH_NS if plan.write_session_start else None)
        builders = [(b, 1000 + r, r, 0) for r in range(n)]
    else:
        for r in range(n):
            session = r * plan.session_gap
            env = {"RANK": str(r), "LOCAL_RANK": str(r % 8)} if plan.environment_rank else {}
            utc = EPOCH_NS + session + plan.clock_skew.get(r, 0) if plan.write_session_start else None
            b = TraceBuilder(command=list(plan.command), environment=env, gpus=[GpuSpec(id=r % 8)],
                             session_start_utc_ns=utc)
            builders.append((b, 4242, r % 8, session))
    signature = (f"{plan.comm_name}(ncclDevKernelArgsStorage<4096ul>)" if plan.comm_name.startswith("nccl")
                 else f"void {plan.comm_name}<float>(float*, int)")
    for r, (b, pid, device, session) in enumerate(builders):
        for k in range(plan.steps):
            c0 = int(compute_start[k, r]) - session
            b.kernel("void gemm_kernel<float>(float*)", c0, int(compute[k, r]), device=device,
                     stream=7, pid=pid, tid=pid)
            a = int(arrival[k, r]) - session
            b.kernel(signature, a, int(end[k, r]) - int(arrival[k, r]),
                     short_name=plan.comm_name, device=device, stream=13, pid=pid, tid=pid)
            if plan.overlap:
                b.kernel("void elementwise_kernel<float>(float*)", a, plan.overlap, device=device, stream=7, pid=pid, tid=pid)
    paths: list[Path] = []
    if plan.one_trace:
        paths.append(builders[0][0].write(folder / "job_all_ranks.sqlite"))
    else:
        for r, (b, *_rest) in enumerate(builders):
            paths.append(b.write(folder / plan.file_name.format(rank=r, index=r)))
    return Simulated(arrival, end, paths)


def run_job_rules(rules: Iterable[str], paths: Iterable[str | Path], *,
                  options: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """Run job rules over the traces of a job; returns the :class:`~nsys_rules.job_run.JobOutcome` (None: no job).

    Raises ``AssertionError`` when a job rule raised, with its traceback.
    """
    from nsys_rules.settings import Settings
    from nsys_rules.inputs import open_trace
    from nsys_rules.plugin_manager import build_registry
    from nsys_rules.job_run import Collected, collect, run_job

    registry = build_registry(autoload=True)
    classes = [registry.rules[name] for name in rules]
    settings = Settings(rule_options={k: dict(v) for k, v in (options or {}).items()})
    path_list = [Path(p) for p in paths]
    collected = Collected()
    for path in path_list:
        trace = open_trace(path)
        try:
            collected.extend(collect(trace, classes, settings, several=len(path_list) > 1))
        finally:
            trace.close()
    outcome = run_job(collected, classes, settings)
    if outcome is not None and outcome.errors:
        first = outcome.errors[0]
        raise AssertionError(f"job rule raised: {first.error}\n{first.traceback}")
    return outcome
