"""What nsys's own diagnostics mean for the analysis: each warning or error explained.

nsys writes into the report what went wrong during the capture (``DIAGNOSTIC_EVENT``, read by
:mod:`nsys_rules.loaders.diagnostics`). Every warning or error row becomes a :class:`Reason`:
a stable ``code``, how much it weighs (``note``: nothing this tool reads is touched; ``caveat``:
numbers from the named tables may be off; ``untrustworthy``: they are), the canonical tables it
touches and the capture flag or environment that avoids it.

The catalog below covers every warning and error message of the 60 exports with a diagnostic
table under ``../shared`` (nsys 2024.5 to 2026.2; surveyed with SQL over ``DIAGNOSTIC_EVENT``
joined to ``StringIds``). Info rows (``Number of CUDA events collected``, ``Profiling has
started``) say nothing went wrong and are left out. The counts nsys prints (``CUPTI events
produced`` against ``CUDA events collected``) are no loss measure: every intact h200 trace shows
produced > collected (decode_eager 23245 vs 23174), as CUPTI counts its own internal records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from nsys_rules.loaders.diagnostics import ERROR, WARNING, Diagnostic

#: Levels of a reason, weakest first; the verdict is decided by the strongest.
LEVELS = ("note", "caveat", "untrustworthy")
#: The CUDA tables (what "CUDA trace" holds).
CUDA_TABLES = ("kernels", "api", "memcpy", "memset", "sync", "graph_trace", "memory_usage")


@dataclass(frozen=True)
class Reason:
    """One reason to doubt (or a note about) a trace: from nsys's diagnostics or the trace's own checks.

    ``tables`` are the canonical tables whose numbers it touches (empty: none this tool reads);
    ``devices`` the GPUs it touches (empty: all, or none in particular); ``size`` its measured size
    (``count`` of ``of``, ``pct``, ``steady_pct``: the share of the steady state it touches).
    """

    code: str
    level: str
    source: str  # "nsys" (a diagnostic row) or "check" (the trace checked against itself)
    message: str
    fix: str
    tables: tuple[str, ...] = ()
    devices: tuple[int, ...] = ()
    size: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``validity.reasons[]`` entry."""
        out: dict[str, Any] = {"code": self.code, "level": self.level, "source": self.source,
                               "message": self.message, "tables": list(self.tables), "fix": self.fix}
        if self.devices:
            out["devices"] = list(self.devices)
        if self.size:
            out["size"] = dict(self.size)
        return out


@dataclass(frozen=True)
class _Entry:
    code: str
    pattern: re.Pattern[str]
    level: str
    tables: tuple[str, ...]
    meaning: str
    fix: str


def _e(code: str, pattern: str, level: str, tables: tuple[str, ...], meaning: str, fix: str) -> _Entry:
    return _Entry(code, re.compile(pattern, re.IGNORECASE | re.DOTALL), level, tables, meaning, fix)


_PARANOID = ("let nsys sample the CPU: `sudo sh -c 'echo 2 >/proc/sys/kernel/perf_event_paranoid'` (1 for kernel "
             "samples) before `nsys profile`, or silence it with `--sample=none --cpuctxsw=none`")

#: Message patterns, first match wins. ``level`` is the weight when the message applies to the data
#: this tool reads; :func:`explain` lowers CUDA/NVTX ones to notes when the trace shows they do not.
CATALOG: tuple[_Entry, ...] = (
    _e("cuda-events-lost", r"^Not all CUDA events might have been collected", "caveat", CUDA_TABLES,
       "nsys says not all CUDA events were collected: kernels, copies or calls may be missing",
       "capture with larger CUPTI buffers (`--cuda-flush-interval=100`, or a shorter `--duration`); with "
       "`-c cudaProfilerApi` the calls outside the range are dropped by design"),
    _e("nvtx-events-lost", r"^Not all NVTX events might have been collected", "caveat", ("nvtx",),
       "nsys says not all NVTX events were collected: ranges (and the steps they mark) may be missing",
       "capture the whole program (`nsys profile` without `--duration`/`-c`), or end every range before the "
       "capture ends"),
    _e("osrt-events-lost", r"^Not all OS runtime libraries events might", "note", (),
       "not all OS runtime (osrt) events were collected; this tool reads none", "`--trace=cuda,nvtx` leaves osrt out"),
    _e("cuda-not-started", r"^CUDA profiling might have not been started", "note", CUDA_TABLES,
       "CUDA profiling did not start in a process (usually one that ran no CUDA: a launcher, a helper)",
       "if the CUDA program itself is missing, make sure it is started by `nsys profile` (not forked off "
       "before it) and that `--trace=cuda` is on"),
    _e("no-cuda-events", r"^(No|Zero) CUDA events (were )?collected", "note", CUDA_TABLES,
       "a process ran no CUDA (launcher, shell, data loader)",
       "nothing to do when another process holds the GPU work; else capture with `--trace=cuda`"),
    _e("attach-failed", r"^Failed to connect to the application", "caveat", CUDA_TABLES,
       "nsys could not inject into a process: whatever it ran on the GPU is not in the trace",
       "start the program under `nsys profile` (not attached later), and `nsys status -e` for the injection"),
    _e("driver-unsupported", r"^Installed CUDA driver version .* is not supported", "note", CUDA_TABLES,
       "the CUDA trace was collected with libraries for an older driver; calls new to the installed driver "
       "may be missing (the trace's own checks look for lost records)",
       "capture with an nsys release that supports the installed driver"),
    _e("um-untraceable", r"Unified Memory cannot be traced", "note", ("memcpy",),
       "Unified Memory page migrations were not traced on this GPU (no peer-to-peer support)",
       "`--cuda-um-cpu-page-faults=false --cuda-um-gpu-page-faults=false` silences it; UM transfers stay unseen"),
    _e("scheduling-absent", r"^Scheduling information is absent", "note", (),
       "no CPU scheduling data: thread states are guessed from OS runtime calls; this tool reads none",
       "`--cpuctxsw=process-tree` with perf_event_paranoid <= 2 (" + _PARANOID + ")"),
    _e("cpu-sampling-off", r"perf event paranoid|Unable to configure the collection of (CPU )?IP|"
       r"Collection of (CPU )?IP|Unable to collect (CPU )?kernel IP|requires kernel version|LBR\) backtrace sampling",
       "note", (), "CPU sampling or backtraces were off (perf_event_paranoid, kernel); host samples are missing",
       _PARANOID),
    _e("gpu-metrics-denied", r"^GPU Metrics: .*permission", "note", (),
       "GPU metrics were not sampled: the user may not read the GPU performance counters",
       "run as root or set `NVreg_RestrictProfilingToAdminUsers=0` (https://developer.nvidia.com/ERR_NVGPUCTRPERM); "
       "`nsys-rules doctor` checks it"),
    _e("symbols-unresolved", r"^No MMAP events were received", "note", (),
       "symbols of CPU samples may stay unresolved for a process", "capture the process from its start"),
    _e("profiler-range-ignored", r"^The cuda?Profiler(Start|Stop) API was ignored", "note", (),
       "only the first cudaProfilerStart/Stop pair was captured", "`-c cudaProfilerApi --capture-range-end=repeat` "
       "captures every range"),
    _e("nvtx-not-used", r"^(No|Zero) NVTX events (were )?collected", "note", (),
       "a process emitted no NVTX", "annotate steps with NVTX ranges (`torch.cuda.nvtx.range`) for step-level results"),
    _e("other-api-unused", r"^(No|Zero) (OpenGL|OS runtime libraries|cuDNN|cuBLAS|OpenACC|MPI|Vulkan) events|"
       r"^(OpenGL|OS runtime libraries|cuDNN|cuBLAS|OpenACC) profiling might have not been started", "note", (),
       "a traced API was not used by a process; this tool reads none of it",
       "leave it out of `--trace` (e.g. `--trace=cuda,nvtx`)"),
)


def explain(rows: list[Diagnostic] | None, has_cuda: bool, has_nvtx: bool, profiler_range: bool) -> list[Reason]:
    """Every warning and error of ``rows`` as a reason, one per code (the count of rows in ``size``).

    ``has_cuda``/``has_nvtx``: whether the trace holds CUDA/NVTX rows (a "no CUDA events" message about one
    process is then about another process); ``profiler_range``: a ``-c cudaProfilerApi`` capture, whose
    "not all events" message is about what ran outside the range (the trace's own checks still judge inside)."""
    if rows is None:
        return [Reason("no-diagnostics", "note", "nsys", "the export has no DIAGNOSTIC_EVENT table (nsys before "
                       "2024): the verdict rests on the trace's own checks alone",
                       "export with a newer nsys (`nsys export --type=sqlite`) to read nsys's own diagnostics")]
    counts: dict[str, int] = {}
    first: dict[str, tuple[_Entry | None, str]] = {}
    for row in rows:
        if row.severity not in (WARNING, ERROR):
            continue
        entry = next((e for e in CATALOG if e.pattern.search(row.text)), None)
        code = entry.code if entry is not None else "nsys-" + ("error" if row.severity == ERROR else "warning")
        counts[code] = counts.get(code, 0) + 1
        first.setdefault(code, (entry, row.text))
    out = []
    for code in sorted(counts):
        entry, text = first[code]
        if entry is None:  # a message the catalog does not know yet: said as nsys wrote it
            out.append(Reason(code, "note", "nsys", f"nsys: {text.strip()[:300]}", "`nsys status -e` checks the "
                              "capture environment", size={"rows": counts[code]}))
            continue
        level = _level(entry, has_cuda, has_nvtx, profiler_range)
        message = entry.meaning + (" (a -c cudaProfilerApi capture: what ran outside the range)"
                                   if profiler_range and code in ("cuda-events-lost", "nvtx-events-lost") else "")
        out.append(Reason(code, level, "nsys", message, entry.fix, entry.tables, size={"rows": counts[code]}))
    return out


def _level(entry: _Entry, has_cuda: bool, has_nvtx: bool, profiler_range: bool) -> str:
    if entry.code == "cuda-events-lost":
        return "note" if profiler_range or not has_cuda else entry.level
    if entry.code == "nvtx-events-lost":
        return "note" if profiler_range or not has_nvtx else entry.level
    if entry.code == "attach-failed" and not has_cuda:
        return "caveat"
    return entry.level


def codes(reasons: Iterable[Reason]) -> list[str]:
    """The codes of ``reasons``, in order (for tests and logs)."""
    return [r.code for r in reasons]
