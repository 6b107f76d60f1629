"""Where a real ``check`` reaches its memory peak: resident memory per phase, sampled in the process.

Usage: python benchmarks/peak_phases.py TRACE [check arguments...]

Runs ``nsys-rules check TRACE --format json --fail-on never --no-plugins`` in this process (the
CLI's own path: read-ahead, preload, windows, budget, every rule, the answer, the JSON) while a
thread samples the resident set size every few milliseconds and, at each sample, what the
main thread is doing. A phase is named by the stack: the rule module running (``rule kernel_tail``),
else the innermost frame of the model or the loaders (``model/budget.py step_budget``), else the
engine or the output. Prints the process's peak RSS (``ru_maxrss``, the number ``/usr/bin/time``
gives) and, per phase, its seconds and the highest and lowest RSS sampled in it, by highest
first: the phase at the top sets the peak, the low figure is what earlier phases left held.

Unlike ``profile_rules.py`` (which runs the phases itself, one by one) this measures the command
users run; unlike ``tracemalloc`` or ``memray`` it sees Arrow's and SQLite's memory too and
counts only touched pages (the Arrow pools reserve virtual memory that a malloc tracer counts
as allocated).
"""

from __future__ import annotations

import collections
import io
import os
import resource
import sys
import threading
import time
from contextlib import redirect_stdout
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
INTERVAL_S = 0.004


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE / 2**20


def phase_of(frame: FrameType | None) -> str:
    """A phase name for the main thread's stack: the rule module, else the innermost model/loader frame."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    stack.reverse()  # outermost first
    for f in stack:
        path = f.f_code.co_filename
        if f"{os.sep}rules{os.sep}" in path and f"{os.sep}nsys_rules{os.sep}" not in path:
            return "rule " + Path(path).stem
    for marker in ("model", "loaders", "analysis", "formatters", "stats"):
        for f in reversed(stack):
            path = f.f_code.co_filename
            if f"nsys_rules{os.sep}{marker}{os.sep}" in path:
                return f"{marker}/{Path(path).name} {f.f_code.co_name}"
    for f in reversed(stack):
        if f"nsys_rules{os.sep}" in f.f_code.co_filename:
            return f"{Path(f.f_code.co_filename).name} {f.f_code.co_name}"
    return "imports/other"


class Sampler(threading.Thread):
    """Samples RSS and the main thread's phase until stopped."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.main = threading.main_thread().ident
        self.done = threading.Event()
        self.phases: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, float("inf"), 0.0])
        self.order: list[str] = []

    def run(self) -> None:
        last = time.perf_counter()
        while not self.done.wait(INTERVAL_S):
            now = time.perf_counter()
            rss = _rss_mb()
            frame = sys._current_frames().get(self.main)  # noqa: SLF001 - a profiler's job
            name = phase_of(frame)
            del frame
            entry = self.phases[name]
            if name not in self.order:
                self.order.append(name)
                entry[3] = len(self.order)
            entry[0] += now - last
            entry[1] = max(entry[1], rss)
            entry[2] = min(entry[2], rss)
            last = now


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit(__doc__)
    sys.path.insert(0, str(ROOT))
    sampler = Sampler()
    sampler.start()
    began = time.perf_counter()
    from nsys_rules.cli import main as cli_main  # noqa: PLC0415 - imports are part of what is measured

    sink = io.StringIO()
    with redirect_stdout(sink):
        try:
            code = cli_main(["check", args[0], "--format", "json", "--fail-on", "never", "--no-plugins", *args[1:]])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    seconds = time.perf_counter() - began
    sampler.done.set()
    sampler.join()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args[0]}: exit {code}, {seconds:.1f} s, peak RSS {peak:.0f} MB ({len(sink.getvalue())} bytes of JSON)")
    rows = sorted(sampler.phases.items(), key=lambda kv: -kv[1][1])
    print(f"{'phase':52} {'s':>6} {'max MB':>7} {'min MB':>7}  order")
    for name, (secs, high, low, order) in rows:
        if secs >= 0.02 or high >= 0.9 * peak:
            print(f"{name[:52]:52} {secs:6.2f} {high:7.0f} {low:7.0f}  {int(order)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
