"""nsys-rules against NVIDIA's own nsys on the same trace and machine, as one table.

Usage (on a host where nsys is installed, e.g. the H200 machine):
    python benchmarks/nsys_side_by_side.py TRACE.sqlite --nsys /path/to/nsys [--repeat 3] [--env K=V ...]

Figures, each a whole process, wall time and peak RSS from ``wait4`` (medians of --repeat):
the bare Arrow read floor (../shared/tools/bare_read.py or --bare), ``nsys-rules check`` with
every built-in rule, ``nsys-rules stats --report cuda_gpu_kern_sum``, ``nsys stats --report
cuda_gpu_kern_sum`` and ``nsys analyze`` (its six CUDA rules). Ratios are against
``nsys stats``'s single kernel report, the figure the issue asks us to beat.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds, peak RSS MB, exit status) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024.0, os.waitstatus_to_exitcode(status)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--nsys", required=True, help="path of the nsys executable")
    ap.add_argument("--bare", default=str(HERE.parent.parent / "shared" / "tools" / "bare_read.py"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--env", action="append", default=[], help="extra environment for nsys (K=V)")
    args = ap.parse_args()
    env = dict(os.environ)
    nsys_env = dict(env)
    for item in args.env:
        key, _, value = item.partition("=")
        nsys_env[key] = value
    py = sys.executable
    figures = [
        ("bare Arrow read (floor)", [py, args.bare, args.trace], env),
        ("nsys-rules check (all rules)", [py, "-m", "nsys_rules", "check", args.trace, "--fail-on", "never"], env),
        ("nsys-rules stats cuda_gpu_kern_sum", [py, "-m", "nsys_rules", "stats", "--report", "cuda_gpu_kern_sum",
                                                args.trace], env),
        ("nsys stats cuda_gpu_kern_sum", [args.nsys, "stats", "-q", "--force-export=false", "--report",
                                          "cuda_gpu_kern_sum", "--format", "csv", "--output", "-", args.trace], nsys_env),
        ("nsys analyze (6 CUDA rules)", [args.nsys, "analyze", "-q", args.trace], nsys_env),
    ]
    rows = []
    for name, argv, fig_env in figures:
        runs = [measure(argv, fig_env) for _ in range(args.repeat)]
        rows.append((name, statistics.median(r[0] for r in runs), max(r[1] for r in runs), {r[2] for r in runs}))
    reference = rows[3][1]
    print(f"{'figure':38s} {'s':>8s} {'x nsys stats':>13s} {'RSS MB':>8s} exit")
    for name, seconds, rss, codes in rows:
        print(f"{name:38s} {seconds:8.2f} {seconds / reference:13.2f} {rss:8.0f} {sorted(codes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
