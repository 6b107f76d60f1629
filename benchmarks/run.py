"""Speed and memory of nsys-rules against the floor, as one table of ratios.

Usage:
    python benchmarks/run.py [TRACE.sqlite] [--repeat 3] [--growth 1,2,4,8] [--workdir /tmp/nsys-rules-bench]

Without TRACE, ``../shared/traces/big/big_decode.sqlite.xz`` is unpacked into the work folder
(never into the repository). Each figure is a whole process (imports included), run
``--repeat`` times interleaved with the floor, so that machine load hits both alike; the
table shows medians. The floor is ``../shared/tools/bare_read.py``: an Arrow read of the
kernel, API and NVTX columns a full rule run needs, and nothing else. Peak RSS comes from
``wait4`` (the same number ``/usr/bin/time -v`` prints as "Maximum resident set size").

``--growth`` builds 2x, 4x, 8x traces with ``benchmarks/replicate.py`` and shows how
``check`` time and memory grow with size (linear is the target).
"""

from __future__ import annotations

import argparse
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared"
BIG_XZ = SHARED / "traces" / "big" / "big_decode.sqlite.xz"
BARE = SHARED / "tools" / "bare_read.py"

#: (figure, command after the trace is substituted for {t}, time target as a multiple of the floor)
FIGURES = (
    ("check, every built-in rule", ["-m", "nsys_rules", "check", "{t}", "--fail-on", "never"], 2.0),
    ("check --format json", ["-m", "nsys_rules", "check", "{t}", "--format", "json", "--fail-on", "never"], 2.0),
    ("stats --report cuda_gpu_kern_sum", ["-m", "nsys_rules", "stats", "{t}", "--report", "cuda_gpu_kern_sum"], 1.5),
)
RSS_TARGET_MB = 350.0


@dataclass
class Run:
    """One process: wall seconds, peak RSS in MB, exit status, CPU seconds (user + system)."""

    seconds: float
    rss_mb: float
    status: int
    cpu: float = 0.0


def measure(argv: list[str], timeout: float | None = None) -> Run:
    """Run ``argv`` as a child process; wall time and peak RSS from ``wait4``; killed after ``timeout`` s."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    timer = threading.Timer(timeout, proc.kill) if timeout else None
    if timer:
        timer.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if timer:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.stderr.write(f"warning: {' '.join(argv)} exited {proc.returncode}: {err.decode(errors='replace')[-300:]}\n")
    return Run(seconds, usage.ru_maxrss / 1024.0, proc.returncode, usage.ru_utime + usage.ru_stime)


def unpack_big(workdir: Path) -> Path:
    """The big trace, unpacked into ``workdir`` once."""
    target = workdir / "big_decode.sqlite"
    if not target.exists():
        if not BIG_XZ.exists():
            raise SystemExit(f"no trace given and {BIG_XZ} is absent")
        tmp = target.with_suffix(".part")
        with lzma.open(BIG_XZ) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        tmp.rename(target)
    return target


def _median(runs: list[Run]) -> Run:
    return Run(statistics.median(r.seconds for r in runs), statistics.median(r.rss_mb for r in runs),
               max(r.status for r in runs), statistics.median(r.cpu for r in runs))


def _fmt_row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """A plain aligned text table on stdout."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(_fmt_row(header, widths))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(_fmt_row(row, widths))


def benchmark(trace: Path, repeat: int) -> None:
    """The main table: each figure against the bare read, same run, medians."""
    py = sys.executable
    floors: list[Run] = []
    figures: dict[str, list[Run]] = {name: [] for name, _, _ in FIGURES}
    for _ in range(repeat):
        floors.append(measure([py, str(BARE), str(trace)]))
        for name, args, _ in FIGURES:
            figures[name].append(measure([py] + [a.replace("{t}", str(trace)) for a in args]))
    floor = _median(floors)
    rows = [["bare Arrow read (floor)", f"{floor.seconds:.2f}", f"{floor.seconds:.2f}", "1.00", "-",
             f"{floor.rss_mb:.0f}", "-", f"{floor.cpu:.2f}", "1.00"]]
    for name, _, target in FIGURES:
        runs = figures[name]
        med = _median(runs)
        ok_t = "ok" if med.seconds <= target * floor.seconds else "OVER"
        ok_m = "ok" if med.rss_mb <= RSS_TARGET_MB else "OVER"
        if med.status not in (0, 1):
            ok_t = ok_m = f"exit {med.status}"
        ratios = sorted(r.seconds / f.seconds for r, f in zip(runs, floors, strict=True))
        rows.append([name, f"{med.seconds:.2f}", f"{floor.seconds:.2f}",
                     f"{med.seconds / floor.seconds:.2f}", f"<= {target:.1f} {ok_t}",
                     f"{med.rss_mb:.0f}", f"<= {RSS_TARGET_MB:.0f} {ok_m}", f"{med.cpu:.2f}",
                     f"{med.cpu / floor.cpu:.2f}" if floor.cpu else "-"])
        rows[-1][0] += f" (ratios {', '.join(f'{x:.2f}' for x in ratios)})" if len(ratios) > 1 else ""
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.0f} MB), median of {repeat} interleaved runs")
    print_table(["figure", "seconds", "floor s", "ratio", "target", "RSS MB", "RSS target", "CPU s", "CPU ratio"],
                rows)
    print("(CPU s: user + system of the process; its ratio is steadier than wall time on a loaded machine)")


def growth(trace: Path, factors: list[int], workdir: Path, repeat: int) -> None:
    """``check`` time and RSS at 1x, 2x, 4x, 8x the trace, each against its own floor."""
    sys.path.insert(0, str(HERE))
    from replicate import replicate  # noqa: PLC0415 - a sibling script, not a package

    py = sys.executable
    rows = []
    base: tuple[float, float] | None = None
    for factor in factors:
        path = trace if factor == 1 else workdir / f"{trace.stem}_x{factor}.sqlite"
        if factor != 1 and not path.exists():
            replicate(trace, path, factor)
        floors, checks = [], []
        for _ in range(repeat):
            floors.append(measure([py, str(BARE), str(path)]))
            checks.append(measure([py, "-m", "nsys_rules", "check", str(path), "--fail-on", "never"]))
        floor, check = _median(floors), _median(checks)
        if base is None:
            base = (check.seconds, check.rss_mb)
        rows.append([f"{factor}x", f"{path.stat().st_size / 1e6:.0f}", f"{floor.seconds:.2f}", f"{floor.rss_mb:.0f}",
                     f"{check.seconds:.2f}", f"{check.seconds / floor.seconds:.2f}", f"{check.rss_mb:.0f}",
                     f"{check.seconds / base[0] / factor:.2f}", f"{check.rss_mb / floor.rss_mb:.2f}"])
    print("growth: check with every built-in rule on replicated traces (time/1x/factor near 1.0 or below = linear)")
    print_table(["size", "file MB", "floor s", "floor MB", "check s", "ratio", "check MB", "time/1x/factor",
                 "MB/floor MB"], rows)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description="nsys-rules speed and memory against the bare Arrow read")
    parser.add_argument("trace", nargs="?", type=Path, help="trace (default: the big shared trace, unpacked)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the table shows medians")
    parser.add_argument("--growth", default="", help="size factors to show growth for, e.g. 1,2,4,8")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "nsys-rules-bench",
                        help="where unpacked and replicated traces go")
    parser.add_argument("--no-main", action="store_true", help="only the growth table")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not BARE.exists():
        raise SystemExit(f"{BARE} is absent: the floor needs ../shared/tools/bare_read.py")
    trace = args.trace or unpack_big(args.workdir)
    if not args.no_main:
        benchmark(trace, args.repeat)
    if args.growth:
        if not args.no_main:
            print()
        growth(trace, [int(x) for x in args.growth.split(",")], args.workdir, max(1, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
