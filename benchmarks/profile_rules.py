"""Where the time and memory of a ``check`` go: the preload, then each rule on its own.

Usage: python benchmarks/profile_rules.py TRACE.sqlite [--select RULES]

Prints the tables and columns the selected rules (and the step model) make the engine preload
(with their size in memory), the GPU activity table, the windows and the step budget, then per
rule its seconds, the peak memory it allocates beyond the loaded frames
(tracemalloc; numpy and pandas report their buffers to it) and the process's peak RSS while it
runs (reset before each rule on Linux, so it is the rule's own; the kernel's RSS counters lag a
little, so a whole process under /usr/bin/time reads a few MB more). Use it to find the rule that breaks
the speed or memory target on a big trace.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import tracemalloc
from pathlib import Path

from nsys_rules.model.activity import gpu_ops
from nsys_rules.model.budget import step_budget
from nsys_rules.model.steps import model_needs
from nsys_rules.settings import Settings
from nsys_rules.engine import TraceWindows
from nsys_rules.options import effective_options, rule_window_kind, select_rules
from nsys_rules.inputs import open_trace
from nsys_rules.malloc_tune import tune_malloc
from nsys_rules.plugin_manager import build_registry
from nsys_rules.rule import RuleContext


def _reset_peak() -> bool:
    """Restart the peak-RSS count (Linux: VmHWM via clear_refs), so each rule's peak is its own. True when done."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB; peak since the last reset where it works."""
    with open("/proc/self/statm") as fh:
        current = int(fh.read().split()[1]) * resource.getpagesize() / 2**20
    try:
        with open("/proc/self/status") as fh:
            hwm = next(line for line in fh if line.startswith("VmHWM:"))
        return current, int(hwm.split()[1]) / 1024
    except (OSError, StopIteration):
        return current, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--select", default="", help="comma-separated rule names (default: all)")
    parser.add_argument("--no-tracemalloc", action="store_true", help="RSS only (tracemalloc slows numpy work down)")
    args = parser.parse_args(argv)
    tune_malloc()  # as the CLI does
    registry = build_registry()
    settings = Settings(select=[s for s in args.select.split(",") if s])
    rules = [r for r in select_rules(registry, settings) if getattr(r, "scope", "trace") == "trace"]
    trace = open_trace(args.trace)
    needs: dict[str, list[str]] = {t: list(c) for t, c in model_needs(trace).items()}
    for rule in rules:
        for table, cols in rule.needs().items():
            if trace.has(table):
                needs.setdefault(table, []).extend(c for c in cols if c not in needs.get(table, []))
    traced = not args.no_tracemalloc
    if traced:
        tracemalloc.start()
    print("before preload: RSS %.0f MB (peak %.0f MB)" % _rss_mb())
    t0 = time.perf_counter()
    trace.preload(needs)
    held_mb = tracemalloc.get_traced_memory()[0] / 2**20 if traced else float("nan")
    print(f"preload {time.perf_counter() - t0:.2f} s, {held_mb:.0f} MB held; RSS %.0f MB (peak %.0f MB)" % _rss_mb())
    for table in needs:
        frame = trace.frame(table, needs[table])
        size = frame.memory_usage(deep=False).sum() / 2**20
        print(f"  {table}: {len(frame)} rows, {len(frame.columns)} columns ({', '.join(frame.columns)}), {size:.0f} MB")
    windows = TraceWindows(trace, settings)
    _reset_peak()
    t0 = time.perf_counter()
    ops = gpu_ops(trace)
    print(f"GPU activity: {len(ops)} operations, {time.perf_counter() - t0:.2f} s; RSS %.0f MB (peak %.0f MB)" % _rss_mb())
    for kind in ("steady", "full"):
        _reset_peak()
        t0 = time.perf_counter()
        windows.get(kind)
        print(f"window {kind}: {time.perf_counter() - t0:.2f} s; RSS %.0f MB (peak %.0f MB)" % _rss_mb())
    model = windows.model()
    _reset_peak()
    t0 = time.perf_counter()
    budget = step_budget(trace, model) if model is not None and model.count else None
    print(f"budget: {time.perf_counter() - t0:.2f} s; RSS %.0f MB (peak %.0f MB)" % _rss_mb())
    steps = model if model is not None and model.count else None
    print(f"{'rule':28} {'seconds':>8} {'peak MB':>8} {'RSS MB':>7} {'RSS peak':>8}  findings")
    for rule in rules:
        options = effective_options(rule, settings)
        held = tracemalloc.get_traced_memory()[0] if traced else 0
        if traced:
            tracemalloc.reset_peak()
        _reset_peak()
        t0 = time.perf_counter()
        try:
            window = windows.get(rule_window_kind(rule, options))
            found = len(list(rule().check(RuleContext(trace, rule(), options, window, steps, budget))))
            note = str(found)
        except Exception as exc:  # noqa: BLE001 - a profile reports failures, it does not stop
            note = f"{type(exc).__name__}: {exc}"[:80]
        seconds = time.perf_counter() - t0
        peak = (tracemalloc.get_traced_memory()[1] - held) / 2**20 if traced else float("nan")
        rss, rss_peak = _rss_mb()
        print(f"{rule.name:28} {seconds:8.2f} {peak:8.0f} {rss:7.0f} {rss_peak:8.0f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
