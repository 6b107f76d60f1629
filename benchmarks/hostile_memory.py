"""Does ``--max-memory`` bound memory on traces whose bulk is long strings? And what does pricing text cost?

    python3 benchmarks/hostile_memory.py [--limit 300M] [--sizes 10,40,150] [--big TRACE]

Builds hostile exports in a temporary folder (never in the checkout): NVTX ranges carrying
inline text (few 100 kB strings, or many 1 kB ones) and TEXT stored in the kernels' ``start``
column, at each size in MB. Runs ``check``, ``check --jobs 2`` (two copies) and ``stats``
with ``--max-memory LIMIT`` in child processes and prints the exit code and the peak resident
memory of the child processes above the interpreter's baseline (imports): each run must
either stay under the limit or stop with exit 3 before reading.

``--big`` also times the text pricing (``memory_limit.estimate`` with the limit) on a real
trace against a whole ``check`` of it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 1024 * 1024
BASELINE = ("import resource, nsys_rules.cli, nsys_rules.engine, pyarrow, adbc_driver_sqlite.dbapi\n"
            "from nsys_rules.plugin_manager import build_registry\nbuild_registry(autoload=False)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")


def _base(path: Path, nvtx: int, kernels: int) -> None:
    from nsys_rules.testing import TraceBuilder

    b = TraceBuilder()
    for i in range(nvtx):
        b.nvtx("step", i * 100_000, i * 100_000 + 90_000, registered=False)
    for i in range(kernels):
        b.kernel("gemv", i * 50_000, 20_000)
    b.write(path)


def nvtx_text(path: Path, total: int, rows: int) -> Path:
    """``rows`` NVTX ranges whose inline text adds up to ``total`` bytes (distinct strings)."""
    _base(path, rows, 2000)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE NVTX_EVENTS SET text = printf('%.*c', ?, 'x') || rowid", (total // rows,))
    return path


def kernel_start_text(path: Path, total: int, rows: int = 3000) -> Path:
    """Every other kernel's ``start`` is TEXT, ``total`` bytes in all (damage the loader drops)."""
    _base(path, 100, rows)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = printf('%.*c', ?, 'k') || rowid WHERE rowid % 2 = 0",
                   (2 * total // rows,))
    return path


def run(args: list[str]) -> tuple[int, int, str]:
    """(exit code, peak RSS of the child processes in bytes, first stderr line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-m", "nsys_rules", *args], capture_output=True, text=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of the children is a maximum over all of them so far: run() is only meaningful when it grows,
    # so each measured command runs in a fresh helper process (see measure()).
    return proc.returncode, max(peak, before) * 1024, (proc.stderr.strip().splitlines() or [""])[0]


def measure(args: list[str]) -> tuple[int, int, str]:
    """Run ``args`` from a fresh helper process so that the peak belongs to this command alone."""
    code = ("import json, sys\nsys.path.insert(0, %r)\nfrom hostile_memory import run\n"
            "print(json.dumps(run(sys.argv[1:])))" % str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout
    import json

    exit_code, peak, line = json.loads(out)
    return exit_code, peak, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", default="300M")
    parser.add_argument("--sizes", default="10,40,150", help="MB of text per hostile trace")
    parser.add_argument("--big", help="a real (large) trace to time the text pricing on")
    args = parser.parse_args(argv)
    from nsys_rules.units import parse_size
    from nsys_rules.loaders.memory_limit import human

    limit = parse_size(args.limit)
    baseline = int(subprocess.run([sys.executable, "-c", BASELINE], capture_output=True, text=True,
                                  check=True).stdout.strip())
    print(f"interpreter + imports: {human(baseline)}; limit {human(limit)}: a run must stay under "
          f"{human(limit + baseline)} or exit 3")
    print(f"{'trace':28} {'command':22} {'exit':>4} {'peak-imports':>12}  verdict / first line")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="nsys-rules-hostile-") as tmp:
        folder = Path(tmp)
        for size in (int(s) for s in args.sizes.split(",")):
            traces = {f"nvtx {size} MB in 1.5k": nvtx_text(folder / f"nf{size}.sqlite", size * MB, 1500),
                      f"nvtx {size} MB in 150k": nvtx_text(folder / f"nm{size}.sqlite", size * MB, 150_000),
                      f"kernel start {size} MB": kernel_start_text(folder / f"ks{size}.sqlite", size * MB)}
            for label, path in traces.items():
                commands = {"check": ["check", "--no-plugins", "--format", "json", str(path)],
                            "check --jobs 2": ["check", "--no-plugins", "--format", "json", "--jobs", "2", str(path),
                                               str(path)],
                            "stats nvtx_sum": ["stats", "--report", "nvtx_sum", str(path)],
                            "stats kern_sum": ["stats", "--report", "cuda_gpu_kern_sum", str(path)]}
                for name, command in commands.items():
                    code, peak, line = measure([*command, "--max-memory", args.limit])
                    above = max(peak - baseline, 0)
                    ok = code == 3 or above <= limit
                    failures += not ok
                    verdict = "stopped before reading" if code == 3 else ("within the limit" if ok else "OVER THE LIMIT")
                    print(f"{label:28} {name:22} {code:>4} {human(above):>12}  {verdict}"
                          + (f": {line[:110]}" if code == 3 else ""))
    if args.big:
        _time_pricing(Path(args.big))
    return 1 if failures else 0


def _time_pricing(path: Path) -> None:
    from nsys_rules.loaders import memory_limit
    from nsys_rules.settings import Settings
    from nsys_rules.options import select_rules
    from nsys_rules.inputs import open_trace
    from nsys_rules.plugin_manager import build_registry

    rules = select_rules(build_registry(autoload=False), Settings())
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nsys_rules", "check", "--no-plugins", "--format", "json", "--fail-on", "never",
                    str(path)], capture_output=True, check=False)
    whole = time.perf_counter() - started
    for limit in (memory_limit.default_limit(), 2 * 1024**3):
        trace = open_trace(path)
        needs: dict[str, list[str]] = {}
        for rule in rules:
            if all(trace.has(t) for t in rule.requires):
                for table, cols in rule.needs().items():
                    if trace.has(table):
                        needs.setdefault(table, []).extend(c for c in cols if c not in needs[table])
        for table in needs:
            trace.row_count(table)  # the engine counts rows anyway
        started = time.perf_counter()
        memory_limit.estimate(trace.export, needs, limit)
        cost = time.perf_counter() - started
        trace.close()
        print(f"{path.name}: pricing text with a {memory_limit.human(limit or 0)} limit took {1000 * cost:.0f} ms, "
              f"{100 * cost / whole:.1f} % of a {whole:.2f} s check")


if __name__ == "__main__":
    os.environ.setdefault("NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD", "1")
    sys.exit(main())
