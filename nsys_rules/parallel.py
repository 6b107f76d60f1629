"""Many traces at once: a process pool or Dask, one trace per task, and a cross-trace summary.

Multi-node runs write one export per rank, and sweeps one per run. ``check a b dir/ --jobs N``
analyzes them in N worker processes; ``--dask ADDRESS`` (or ``local``) hands the same per-trace
task to a Dask distributed cluster. Every task opens its trace, runs the selected rules and
returns a :class:`~nsys_rules.engine.TraceResult` plus a small kernel profile; the parent puts
the results back in input order, so the output is the same as a serial run's, whatever order
the tasks finished in.

The cross-trace summary compares the traces: each one's total kernel time and GPU activity
span, the slowest trace against the median, and, for the kernels they share, each kernel's time
per trace with the trace where it is slowest: where one rank loses time to the others.
"""

from __future__ import annotations

import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool
import dataclasses
import gc
import multiprocessing
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable

import numpy as np

from nsys_rules.dask_connect import DEFAULT_DASK_TIMEOUT, connect_client
from nsys_rules.settings import Settings
from nsys_rules.engine import Report, TraceResult, analyze_trace, run_check, select_rules, trace_done
from nsys_rules.errors import ExitCode, InputError, NsysRulesError, UsageError
from nsys_rules.plugin_manager import Registry, build_registry
from nsys_rules.records import RunError
from nsys_rules.model.trace import Trace

#: Kernels per trace kept in its profile (by total time): enough to find the shared heavy kernels.
PROFILE_KERNELS = 50
#: Shared kernels listed in the summary, largest excess time of the slowest trace first.
SUMMARY_KERNELS = 10


# -- one task ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """What a worker needs to analyze one trace: plain data, so it pickles to any worker."""

    path: str
    settings: Settings
    autoload_plugins: bool = True
    profile: bool = True  # the kernel profile feeds the cross-trace summary (several traces only)
    several: bool = False  # other traces are ranks of the same job (the job analysis looks wider)


@dataclass
class JobResult:
    """A worker's answer: the trace's result and kernel profile, or the one-line error that stopped it."""

    path: str
    result: TraceResult | None = None
    profile: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    exit_code: int = 0
    seconds: float = 0.0
    ranks: Any = None  # nsys_rules.job_run.Collected: the trace's ranks for the job rules (small)


_REGISTRIES: dict[bool, Registry] = {}


def _registry(autoload: bool) -> Registry:
    """One registry per worker process (plugins are loaded once, not per trace)."""
    if autoload not in _REGISTRIES:
        _REGISTRIES[autoload] = build_registry(autoload=autoload)
    return _REGISTRIES[autoload]


def analyze_job(job: Job) -> JobResult:
    """Open ``job.path``, run the selected rules, profile its kernels, close it (runs in a worker).

    The worker's working folder is put back afterwards: under ``--dask local`` the rules run in a worker
    thread, where the rule boundary does not guard process state, and a rule's ``os.chdir`` would send the
    worker's next trace (a relative path) elsewhere.
    """
    from nsys_rules.containment import kept_cwd

    with kept_cwd():
        return _analyze_job(job)


def _analyze_job(job: Job) -> JobResult:
    from nsys_rules.inputs import open_trace
    from nsys_rules.job_run import collect

    started = time.perf_counter()
    try:
        registry = _registry(job.autoload_plugins)
        rules = select_rules(registry, job.settings)
        trace = open_trace(Path(job.path), registry.loaders, job.settings.export_format, job.settings.max_memory)
        try:
            result = analyze_trace(trace, rules, job.settings)
            profile = kernel_profile(trace) if job.profile else {}
            ranks = collect(trace, rules, job.settings, job.several)
        finally:
            trace.close()
            # The CLI pauses the collector (malloc_tune.collector_paused), here and in forked workers:
            # the cycles one trace left are not carried into the next one's peak.
            gc.collect()
    except NsysRulesError as exc:
        return JobResult(job.path, error=str(exc), exit_code=int(exc.exit_code),
                         seconds=time.perf_counter() - started)
    except MemoryError:
        return JobResult(job.path, error=f"{job.path}: out of memory; narrow the run with --filter-time or --select",
                         exit_code=int(ExitCode.BAD_INPUT), seconds=time.perf_counter() - started)
    return JobResult(job.path, result, profile, seconds=time.perf_counter() - started, ranks=ranks)


def kernel_profile(trace: Any, top: int = PROFILE_KERNELS) -> dict[str, Any]:
    """Total kernel time, GPU span and the ``top`` kernels by time (name -> [ns, count]) of one trace."""
    if not trace.has("kernels"):
        return {"kernel_ns": 0, "span_ns": 0, "kernels": {}}
    kernels = trace.frame("kernels", ["start", "end", "name"])
    if not len(kernels):
        return {"kernel_ns": 0, "span_ns": 0, "kernels": {}}
    start = kernels["start"].to_numpy()
    end = kernels["end"].to_numpy()
    duration = (end - start).astype(np.float64)
    codes = kernels["name"].cat.codes.to_numpy().astype(np.int64)
    categories = kernels["name"].cat.categories
    # One bincount per table, by category code (code -1, a NULL name, lands in slot 0 and is skipped).
    time_by = np.bincount(codes + 1, weights=duration, minlength=len(categories) + 1)[1:]
    count_by = np.bincount(codes + 1, minlength=len(categories) + 1)[1:]
    order = np.argsort(-time_by, kind="stable")[:top]
    return {"kernel_ns": int(duration.sum()), "span_ns": int(end.max() - start.min()),
            "kernels": {str(categories[i]): [int(time_by[i]), int(count_by[i])] for i in order if count_by[i]}}


# -- running many --------------------------------------------------------------------------
class Progress:
    """``[#####.....] 3/10 traces  name`` on a terminal's stderr; silent when stderr is not a terminal."""

    def __init__(self, total: int, stream: IO[str] | None = None, enabled: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = (self.stream.isatty() if enabled is None else enabled) and total > 0

    def step(self, label: str) -> None:
        """One more trace finished."""
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / self.total)
        name = Path(label).name
        self.stream.write(f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} traces  {name}")
        self.stream.flush()

    def close(self) -> None:
        """Clear the bar so that later stderr lines start clean."""
        if self.enabled and self.done:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _pool_context() -> Any:
    # fork starts workers in milliseconds with pandas already imported; the parent holds no open
    # trace or thread when the pool starts. Elsewhere (macOS, Windows) spawn is the safe default.
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods and sys.platform.startswith("linux") else "spawn")


def _ignore_interrupt() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the pool; a worker printing its own
    # KeyboardInterrupt traceback would only add noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_pool(jobs: list[Job], workers: int, on_done: Callable[[JobResult], None]) -> list[JobResult]:
    """Every job in a pool of ``workers`` processes; a worker that dies loses only its own trace.

    A worker killed (SIGKILL, the OOM killer, a segfault in an extension) breaks the whole pool: every trace
    not finished by then fails with it. Those traces run again, each alone in a one-worker pool, so the one
    that kills its worker is reported failed (exit 4) and the others complete. When only one trace was
    unfinished it is the one that died, and is not run again.
    """
    results: dict[int, JobResult] = {}
    broken = _pool_round(jobs, list(range(len(jobs))), workers, results, on_done)
    for i in broken if len(broken) > 1 else []:
        if _pool_round(jobs, [i], 1, results, on_done):
            _worker_died(jobs, i, results, on_done)
    if len(broken) == 1:
        _worker_died(jobs, broken[0], results, on_done)
    return [results[i] for i in range(len(jobs))]


def _worker_died(jobs: list[Job], i: int, results: dict[int, JobResult], on_done: Callable[[JobResult], None]) -> None:
    results[i] = JobResult(jobs[i].path, error=f"{jobs[i].path}: its worker process died (killed by a signal, out of "
                           "memory or crashed) while it analyzed this trace; the other traces are reported",
                           exit_code=int(ExitCode.INCOMPLETE))
    on_done(results[i])


def _pool_round(jobs: list[Job], indices: list[int], workers: int, results: dict[int, JobResult],
                on_done: Callable[[JobResult], None]) -> list[int]:
    """``jobs[indices]`` in one pool, into ``results``; the indices left unfinished because the pool broke."""
    broken: list[int] = []
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context(), initializer=_ignore_interrupt)
    try:
        futures = {pool.submit(analyze_job, jobs[i]): i for i in indices}
        for future in cf.as_completed(futures):
            i = futures[future]
            try:
                results[i] = future.result()
            except BrokenProcessPool:
                broken.append(i)  # this trace's worker, or another one, died: which one is found alone
                continue
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - a worker's failure is one trace's error
                results[i] = JobResult(jobs[i].path, error=f"{jobs[i].path}: worker failed ({type(exc).__name__}: {exc})",
                                       exit_code=int(ExitCode.INCOMPLETE))
            on_done(results[i])
    except BaseException:
        # Interrupted (or failing): stop the workers now rather than wait for their traces to finish.
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return sorted(broken)


def _run_dask(jobs: list[Job], address: str, workers: int, on_done: Callable[[JobResult], None],
              client: Any = None, timeout: float = DEFAULT_DASK_TIMEOUT) -> list[JobResult]:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UsageError("--dask needs Dask distributed: pip install 'nsys-rules[dask]'") from None
    cluster = None
    own_client = client is None
    if client is None:
        if address == "local":
            cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        else:
            client = connect_client(address, timeout)  # one line within about `timeout` s when it is no scheduler
    try:
        futures = client.map(analyze_job, jobs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: dict[int, JobResult] = {}
        for future in as_completed(futures):
            i = index[future.key]
            try:
                results[i] = future.result()
            except Exception as exc:  # noqa: BLE001 - a lost worker is one trace's error, not the run's
                results[i] = JobResult(jobs[i].path, error=f"{jobs[i].path}: Dask task failed ({type(exc).__name__}: {exc})",
                                       exit_code=int(ExitCode.INCOMPLETE))
            on_done(results[i])
        return [results[i] for i in range(len(jobs))]
    finally:
        if own_client:
            client.close()
        if cluster is not None:
            cluster.close()


def run_many(paths: list[Path], registry: Registry, settings: Settings, *, jobs: int = 1, dask: str | None = None,
             autoload_plugins: bool = True, progress: Progress | None = None, dask_client: Any = None,
             dask_timeout: float = DEFAULT_DASK_TIMEOUT) -> Report:
    """Analyze ``paths`` (serially, in a process pool, or on Dask) into one :class:`Report`.

    The report is the one :func:`~nsys_rules.engine.run_check` gives, with ``cross_trace`` set
    when more than one trace was analyzed. A trace that cannot be read stops the run with its
    one-line error (exit 3), as in a serial run; a worker that dies is an error entry (exit 4).
    """
    if jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    report = run_check([], registry, settings, _opens_nothing)  # the report's frame: its rules, no trace
    # In-process and forked workers reuse this registry (plugins load once); spawned ones build their own.
    _REGISTRIES[autoload_plugins] = registry
    workers = min(jobs, len(paths)) if not (dask or dask_client is not None) else 1
    if workers > 1:
        # Workers run at once on this machine: they share the memory limit (given or 80 % of the free memory).
        from nsys_rules.loaders.memory_limit import default_limit

        total = settings.max_memory if settings.max_memory is not None else default_limit()
        if total is not None:
            settings = dataclasses.replace(settings, max_memory=max(total // workers, 1))
    job_list = [Job(str(p), settings, autoload_plugins, len(paths) > 1, len(paths) > 1) for p in paths]
    bar = progress if progress is not None else Progress(len(job_list) if len(job_list) > 1 else 0)

    def done(res: JobResult) -> None:
        bar.step(res.path)

    try:
        if dask or dask_client is not None:
            answers = _run_dask(job_list, dask or "local", jobs, done, dask_client, dask_timeout)
        elif jobs > 1 and len(job_list) > 1:
            answers = _run_pool(job_list, min(jobs, len(job_list)), done)
        else:
            answers = []
            for job in job_list:
                answers.append(analyze_job(job))
                if answers[-1].result is not None:
                    trace_done(answers[-1].result)  # in the report written if a later rule never stops (deadline)
                done(answers[-1])
                if answers[-1].error and answers[-1].exit_code == ExitCode.BAD_INPUT:
                    break  # as a serial run does: the first unreadable trace ends it
    finally:
        bar.close()
    for answer in answers:
        if answer.error is not None:
            if answer.exit_code == ExitCode.INCOMPLETE:
                report.errors.append(RunError(answer.error, trace=answer.path))
                continue
            raise (UsageError if answer.exit_code == ExitCode.USAGE else InputError)(answer.error)
        assert answer.result is not None
        report.results.append(answer.result)
    profiles = [(a.path, a.profile) for a in answers if a.result is not None]
    if len(profiles) > 1:
        report.cross_trace = cross_trace_summary(profiles)
    from nsys_rules.job_run import Collected, judge_job

    ranks = Collected()
    for answer in answers:
        if answer.ranks is not None:
            ranks.extend(answer.ranks)  # in input order: the traces' order numbers the ranks
    report.job, why = judge_job(ranks, select_rules(registry, settings), settings)
    report.job_note = why if len(answers) > 1 else None
    return report


def _opens_nothing(path: Path) -> Trace:
    raise AssertionError(f"{path}: run_check over no paths opens no trace")


# -- the summary ---------------------------------------------------------------------------
def cross_trace_summary(profiles: Iterable[tuple[str, dict[str, Any]]],
                        top: int = SUMMARY_KERNELS) -> dict[str, Any]:
    """Compare per-trace kernel profiles: the slowest trace, and shared kernels by the slowest's excess.

    ``excess_ns`` of a kernel is its time in the slowest trace for it minus its median over the
    traces: what that rank (or run) loses on that kernel compared with a typical one.
    """
    items = list(profiles)
    paths = [p for p, _ in items]
    traces: list[dict[str, Any]] = [
        {"path": p, "kernel_ns": int(prof.get("kernel_ns", 0)), "span_ns": int(prof.get("span_ns", 0))} for p, prof in items]
    kernel_times: list[int] = [t["kernel_ns"] for t in traces]
    median_kernel = float(statistics.median(kernel_times)) if kernel_times else 0.0
    slow_i = int(np.argmax(kernel_times)) if kernel_times else 0
    summary: dict[str, Any] = {
        "traces": traces,
        "slowest": {"path": paths[slow_i], "kernel_ns": kernel_times[slow_i], "median_kernel_ns": median_kernel,
                    "ratio_to_median": round(kernel_times[slow_i] / median_kernel, 6) if median_kernel else None},
        "kernels": [],
    }
    names: dict[str, None] = {}
    for _, prof in items:
        names.update(dict.fromkeys(prof.get("kernels", {})))
    rows: list[dict[str, Any]] = []
    for name in names:
        per = [prof.get("kernels", {}).get(name) for _, prof in items]
        present = [p for p in per if p is not None]
        if len(present) < 2:
            continue  # a kernel of one trace only has nothing to compare
        times = [p[0] for p in present]
        median = float(statistics.median(times))
        worst = max(range(len(per)), key=lambda i: -1 if per[i] is None else per[i][0])
        worst_ns = per[worst][0]
        rows.append({"kernel": name, "per_trace_ns": [None if p is None else int(p[0]) for p in per],
                     "per_trace_count": [None if p is None else int(p[1]) for p in per],
                     "median_ns": median, "max_ns": int(worst_ns), "slowest": paths[worst],
                     "max_over_median": round(worst_ns / median, 6) if median else None,
                     "excess_ns": int(worst_ns - median)})
    rows.sort(key=lambda r: (-r["excess_ns"], r["kernel"]))
    summary["kernels"] = rows[:top]
    return summary


def default_jobs() -> int:
    """Worker count for ``--jobs 0``: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
