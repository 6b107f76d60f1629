"""Speed and memory of nsys-rules against the floor, as one table of ratios, for SQLite and Parquet exports.

Usage:
    python benchmarks/run.py [TRACE.sqlite] [--parquet DIR.parquetdir] [--formats sqlite,parquetdir]
                             [--repeat 3] [--growth 1,2,4,8] [--workdir /tmp/nsys-rules-bench]

Without TRACE, ``../shared/traces/big/big_decode.sqlite.xz`` is unpacked into the work folder
(never into the repository); without ``--parquet``, ``../shared/traces/big/pq_big_parquet.tar.xz.part*``
(the same program and size, a separate capture, exported with ``--type=parquetdir``) is too.
Each figure is a whole process (imports included), run ``--repeat`` times interleaved with the
floor, so that machine load hits all alike; the table shows medians. The floor is
``../shared/tools/bare_read.py``: an Arrow read of the kernel, API and NVTX columns a full rule
run needs from the SQLite export, and nothing else; every figure, Parquet ones included, is a
multiple of it. Peak RSS comes from ``wait4`` (the same number ``/usr/bin/time -v`` prints as
"Maximum resident set size").

Before measuring, the package's modules are byte-compiled (``compileall``), as ``pip install``
does: with ``PYTHONDONTWRITEBYTECODE`` set (or a read-only checkout) an editable install would
otherwise compile ~110 modules in every run (~0.16 s), which no installed copy pays.

``--shuffled`` writes a copy of the SQLite trace with every table's rows in random order (as nsys 2025.6 on
may export them; ``tests/trace_edit.py``) and times ``check`` on it against the ordered trace: at most 1.25x
the time, within the same 300 MB of peak RSS.

``--growth`` builds 2x, 4x, 8x traces of both formats with ``benchmarks/replicate.py`` and shows
how ``check`` time and memory grow with size (linear is the target).

``--long 5M,10M`` builds long traces from the big SQLite trace with ``benchmarks/make_long.py`` (its
steady steps repeated after one warm-up, kept in ``--long-dir``) and shows ``check`` time and peak RSS
per size against the 1M case: issue 39's targets are within 1.2x of linear time and a peak of 1 GB.

``--metrics [TRACE]`` times ``check`` on a trace with GPU metrics (default: the 346 MB
``g_decode_static_metrics.sqlite`` of ``../shared/traces/metrics/gm.tar.xz.part*``, unpacked into the
work folder) with the metrics read and measured, against the same check with ``--no-gpu-metrics``:
at most 2x the time and 600 MB of peak RSS.
"""

from __future__ import annotations

import argparse
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("NSYS_RULES_SHARED", ROOT.parent / "shared"))
BIG_XZ = SHARED / "traces" / "big" / "big_decode.sqlite.xz"
BIG_PARQUET_PARTS = SHARED / "traces" / "big"
BARE = SHARED / "tools" / "bare_read.py"
FORMATS = ("sqlite", "parquetdir")

#: All built-in rules, whatever plugins the environment has installed.
_CHECK = ["-m", "nsys_rules", "check", "{t}", "--fail-on", "never", "--no-plugins"]
#: (figure, format, command after the trace is substituted for {t}, time target as a multiple of the floor;
#: None: shown for reference only)
FIGURES: tuple[tuple[str, str, list[str], float | None], ...] = (
    ("check, all built-in rules", "sqlite", _CHECK, 1.5),
    ("check --format json", "sqlite", _CHECK + ["--format", "json"], 1.5),
    ("stats --report cuda_gpu_kern_sum", "sqlite", ["-m", "nsys_rules", "stats", "{t}", "--report",
                                                    "cuda_gpu_kern_sum"], 1.5),
    ("bare pyarrow read (same columns)", "parquetdir", ["-c", "{bare_parquet}", "{t}"], None),
    ("check, all built-in rules", "parquetdir", _CHECK, 0.8),
    ("check --format json", "parquetdir", _CHECK + ["--format", "json"], 0.8),
    ("stats --report cuda_gpu_kern_sum", "parquetdir", ["-m", "nsys_rules", "stats", "{t}", "--report",
                                                        "cuda_gpu_kern_sum"], 0.8),
)
#: The bare read's columns, from the Parquet files: what pyarrow alone costs (reference row).
BARE_PARQUET = """
import sys, pyarrow.parquet as pq
d = sys.argv[1]
for t, c in (("CUPTI_ACTIVITY_KIND_KERNEL", ["start", "end", "deviceId", "streamId", "correlationId", "shortName",
                                            "demangledName", "gridX", "blockX"]),
             ("CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "end", "nameId", "correlationId", "globalTid"]),
             ("NVTX_EVENTS", ["start", "end", "textId", "text", "globalTid"])):
    pq.read_table(f"{d}/{t}.parquet", columns=c)
"""
RSS_TARGET_MB = 300.0
METRICS_PARTS = SHARED / "traces" / "metrics"
METRICS_TRACE = "g_decode_static_metrics.sqlite"
#: With GPU metrics: check at most this many times the check that leaves them unread, within this peak RSS.
METRICS_TIME_TARGET = 2.0
METRICS_RSS_TARGET_MB = 600.0
#: Rows in random order: check at most this many times the ordered trace's check, within RSS_TARGET_MB.
SHUFFLED_TIME_TARGET = 1.25


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
        sys.stderr.write(f"warning: {' '.join(argv)[:300]} exited {proc.returncode}: "
                         f"{err.decode(errors='replace')[-300:]}\n")
    return Run(seconds, usage.ru_maxrss / 1024.0, proc.returncode, usage.ru_utime + usage.ru_stime)


def unpack_big(workdir: Path) -> Path:
    """The big SQLite trace, unpacked into ``workdir`` once."""
    target = workdir / "big_decode.sqlite"
    if not target.exists():
        if not BIG_XZ.exists():
            raise SystemExit(f"no trace given and {BIG_XZ} is absent")
        tmp = target.with_suffix(".part")
        with lzma.open(BIG_XZ) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        tmp.rename(target)
    return target


class _Parts:
    """The split archive's parts read as one stream (``cat parts | xz -d``), for lzma."""

    def __init__(self, parts: list[Path]) -> None:
        self.files = [open(p, "rb") for p in parts]

    def read(self, size: int = -1) -> bytes:
        while self.files:
            chunk = self.files[0].read(size)
            if chunk:
                return chunk
            self.files.pop(0).close()
        return b""


def unpack_big_parquet(workdir: Path) -> Path:
    """The big parquetdir capture, unpacked into ``workdir`` once."""
    target = workdir / "pq_big.parquetdir"
    if not target.exists():
        parts = sorted(BIG_PARQUET_PARTS.glob("pq_big_parquet.tar.xz.part*"))
        if not parts:
            raise SystemExit(f"no --parquet given and {BIG_PARQUET_PARTS}/pq_big_parquet.tar.xz.part* are absent")
        staging = workdir / "pq_big.unpacking"
        shutil.rmtree(staging, ignore_errors=True)
        with lzma.open(_Parts(parts)) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[arg-type]
            for member in tar:
                if not member.isfile() or ".." in Path(member.name).parts or Path(member.name).is_absolute():
                    continue
                dest = staging / member.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                with open(dest, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 22)
        found = [p for p in staging.rglob("*.parquetdir") if p.is_dir()]
        if len(found) != 1:
            raise SystemExit(f"expected one *.parquetdir in the archive, found {len(found)}")
        found[0].rename(target)
        shutil.rmtree(staging, ignore_errors=True)
    return target


def unpack_metrics(workdir: Path) -> Path:
    """The biggest GPU metrics capture, unpacked into ``workdir`` once."""
    target = workdir / METRICS_TRACE
    if not target.exists():
        parts = sorted(METRICS_PARTS.glob("gm.tar.xz.part*"))
        if not parts:
            raise SystemExit(f"no --metrics trace given and {METRICS_PARTS}/gm.tar.xz.part* are absent")
        with lzma.open(_Parts(parts)) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[arg-type]
            for member in tar:
                if member.isfile() and Path(member.name).name == METRICS_TRACE:
                    source = tar.extractfile(member)
                    assert source is not None
                    partial = target.with_suffix(".part")
                    with open(partial, "wb") as out:
                        shutil.copyfileobj(source, out, 1 << 22)
                    partial.rename(target)
                    break
    return target


def metrics_benchmark(trace: Path, repeat: int) -> None:
    """``check`` with the GPU metrics read and measured, against the same check with ``--no-gpu-metrics``."""
    plain = _CHECK + ["--format", "json", "--no-gpu-metrics"]
    full = _CHECK + ["--format", "json"]
    without: list[Run] = []
    with_metrics: list[Run] = []
    for _ in range(repeat):
        without.append(measure(_argv(plain, trace)))
        with_metrics.append(measure(_argv(full, trace)))
    base, run = _median(without), _median(with_metrics)
    ratios = sorted(w.seconds / b.seconds for w, b in zip(with_metrics, without, strict=True))
    ratio = run.seconds / base.seconds
    print(f"GPU metrics: {trace} ({_size_mb(trace):.0f} MB); median of {repeat} interleaved runs")
    print_table(["figure", "seconds", "ratio", "target", "RSS MB", "RSS target", "CPU s"], [
        ["check --no-gpu-metrics (metrics unread)", f"{base.seconds:.2f}", "1.00", "-", f"{base.rss_mb:.0f}", "-",
         f"{base.cpu:.2f}"],
        [f"check, GPU metrics measured (ratios {', '.join(f'{x:.2f}' for x in ratios)})", f"{run.seconds:.2f}",
         f"{ratio:.2f}", f"<= {METRICS_TIME_TARGET:.1f} {'ok' if ratio <= METRICS_TIME_TARGET else 'OVER'}",
         f"{run.rss_mb:.0f}",
         f"<= {METRICS_RSS_TARGET_MB:.0f} {'ok' if run.rss_mb <= METRICS_RSS_TARGET_MB else 'OVER'}", f"{run.cpu:.2f}"],
    ])


def shuffled_benchmark(trace: Path, workdir: Path, repeat: int) -> None:
    """``check`` on a copy of ``trace`` whose rows are stored in random order, against the ordered trace."""
    sys.path.insert(0, str(ROOT))
    from tests.trace_edit import shuffled_copy

    shuffled = workdir / f"shuffled_{trace.name}"
    if not shuffled.exists():
        shuffled_copy(trace, shuffled.with_suffix(".part"), seed=38).rename(shuffled)
    command = _CHECK + ["--format", "json"]
    ordered: list[Run] = []
    unordered: list[Run] = []
    for _ in range(repeat):
        ordered.append(measure(_argv(command, trace)))
        unordered.append(measure(_argv(command, shuffled)))
    base, run = _median(ordered), _median(unordered)
    ratio = run.seconds / base.seconds
    print(f"Rows in random order: {shuffled} ({_size_mb(shuffled):.0f} MB); median of {repeat} interleaved runs")
    print_table(["figure", "seconds", "ratio", "target", "RSS MB", "RSS target", "CPU s"], [
        ["check --format json, ordered rows", f"{base.seconds:.2f}", "1.00", "-", f"{base.rss_mb:.0f}",
         f"<= {RSS_TARGET_MB:.0f}", f"{base.cpu:.2f}"],
        ["check --format json, rows shuffled", f"{run.seconds:.2f}", f"{ratio:.2f}",
         f"<= {SHUFFLED_TIME_TARGET:.2f} {'ok' if ratio <= SHUFFLED_TIME_TARGET else 'OVER'}", f"{run.rss_mb:.0f}",
         f"<= {RSS_TARGET_MB:.0f} {'ok' if run.rss_mb <= RSS_TARGET_MB else 'OVER'}", f"{run.cpu:.2f}"],
    ])


def byte_compile() -> None:
    """Write the bytecode caches of the code a check imports (the package, its rule folder and plugins), as an
    installed copy has them."""
    import compileall

    for folder in ("nsys_rules", "rules", "plugins"):
        if (ROOT / folder).is_dir():
            compileall.compile_dir(str(ROOT / folder), quiet=1)


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


def _argv(args: list[str], trace: Path) -> list[str]:
    return [sys.executable] + [a.replace("{t}", str(trace)).replace("{bare_parquet}", BARE_PARQUET) for a in args]


def _size_mb(path: Path) -> float:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file()) / 1e6
    return path.stat().st_size / 1e6


def benchmark(traces: dict[str, Path], formats: list[str], repeat: int) -> None:
    """The main table: each figure against the bare SQLite read, same run, medians."""
    figures = [f for f in FIGURES if f[1] in formats]
    floors: list[Run] = []
    runs: dict[int, list[Run]] = {i: [] for i in range(len(figures))}
    for _ in range(repeat):
        floors.append(measure([sys.executable, str(BARE), str(traces["sqlite"])]))
        for i, (_name, fmt, args, _target) in enumerate(figures):
            runs[i].append(measure(_argv(args, traces[fmt])))
    floor = _median(floors)
    rows = [["bare SQLite Arrow read (floor)", "sqlite", f"{floor.seconds:.2f}", "1.00", "-", f"{floor.rss_mb:.0f}", "-",
             f"{floor.cpu:.2f}", "1.00"]]
    for i, (name, fmt, _args, target) in enumerate(figures):
        med = _median(runs[i])
        ratio = med.seconds / floor.seconds
        ok_t = "-" if target is None else f"<= {target:.1f} {'ok' if ratio <= target else 'OVER'}"
        ok_m = "-" if target is None else f"<= {RSS_TARGET_MB:.0f} {'ok' if med.rss_mb <= RSS_TARGET_MB else 'OVER'}"
        if med.status not in (0, 1):
            ok_t = ok_m = f"exit {med.status}"
        spread = sorted(r.seconds / f.seconds for r, f in zip(runs[i], floors, strict=True))
        label = name + (f" (ratios {', '.join(f'{x:.2f}' for x in spread)})" if len(spread) > 1 else "")
        rows.append([label, fmt, f"{med.seconds:.2f}", f"{ratio:.2f}", ok_t, f"{med.rss_mb:.0f}", ok_m, f"{med.cpu:.2f}",
                     f"{med.cpu / floor.cpu:.2f}" if floor.cpu else "-"])
    for fmt, path in traces.items():
        print(f"{fmt}: {path} ({_size_mb(path):.0f} MB)")
    print(f"median of {repeat} interleaved runs; ratios are to the bare SQLite read of the same run")
    print_table(["figure", "format", "seconds", "ratio", "target", "RSS MB", "RSS target", "CPU s", "CPU ratio"], rows)
    print("(CPU s: user + system of the process; its ratio is steadier than wall time on a loaded machine)")


def _replicated(trace: Path, factor: int, workdir: Path) -> Path:
    """``trace`` at ``factor`` times its size, built once in ``workdir`` (the trace itself at 1x)."""
    sys.path.insert(0, str(HERE))
    from replicate import replicate, replicate_folder  # noqa: PLC0415 - a sibling script, not a package

    if factor == 1:
        return trace
    suffix = ".parquetdir" if trace.is_dir() else ".sqlite"
    path = workdir / f"{trace.name.split('.')[0]}_x{factor}{suffix}"
    if not path.exists():
        partial = path.with_name(path.name + ".part")
        shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(missing_ok=True)
        (replicate_folder if trace.is_dir() else replicate)(trace, partial, factor)
        partial.rename(path)
    return path


def growth(traces: dict[str, Path], formats: list[str], factors: list[int], workdir: Path, repeat: int) -> None:
    """``check`` time and RSS at 1x, 2x, 4x, 8x of each format, against the bare SQLite read at that size."""
    rows = []
    base: dict[str, float] = {}
    for factor in factors:
        sized = {fmt: _replicated(path, factor, workdir) for fmt, path in traces.items()}
        floors = [measure([sys.executable, str(BARE), str(sized["sqlite"])]) for _ in range(repeat)]
        floor = _median(floors)
        for fmt in formats:
            path = sized[fmt]
            check = _median([measure(_argv(_CHECK, path)) for _ in range(repeat)])
            base.setdefault(fmt, check.seconds)
            rows.append([f"{factor}x", fmt, f"{_size_mb(path):.0f}", f"{floor.seconds:.2f}", f"{floor.rss_mb:.0f}",
                         f"{check.seconds:.2f}", f"{check.seconds / floor.seconds:.2f}", f"{check.rss_mb:.0f}",
                         f"{check.seconds / base[fmt] / factor:.2f}", f"{check.rss_mb / floor.rss_mb:.2f}"])
    print("growth: check with all built-in rules on replicated traces, against the bare SQLite read of the same size "
          "(time/1x/factor near 1.0 or below = linear)")
    print_table(["size", "format", "MB", "floor s", "floor MB", "check s", "ratio", "check MB", "time/1x/factor",
                 "MB/floor MB"], rows)


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description="nsys-rules speed and memory against the bare Arrow read")
    parser.add_argument("trace", nargs="?", type=Path, help="SQLite trace (default: the big shared trace, unpacked)")
    parser.add_argument("--parquet", type=Path, help="parquetdir export (default: the big shared capture, unpacked)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="sqlite, parquetdir or both (default)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the table shows medians")
    parser.add_argument("--growth", default="", help="size factors to show growth for, e.g. 1,2,4,8")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "nsys-rules-bench",
                        help="where unpacked and replicated traces go")
    parser.add_argument("--no-main", action="store_true", help="only the growth table (and --long, --shuffled, --metrics)")
    parser.add_argument("--long", default="", help="long trace sizes in kernels made from the big trace, e.g. 5M,10M")
    parser.add_argument("--long-dir", type=Path, default=Path("/tmp/long"), help="where the long traces are kept")
    parser.add_argument("--long-args", default="", help="extra check arguments for the long case, e.g. "
                                                        "'--max-memory 500M'")
    parser.add_argument("--shuffled", action="store_true",
                        help="also time check on a copy of the SQLite trace with its rows in random order")
    parser.add_argument("--metrics", nargs="?", const="", metavar="TRACE",
                        help="also time check on a GPU metrics trace with and without the metrics read (default: the "
                             "346 MB shared capture, unpacked into the work folder)")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    byte_compile()
    if args.metrics is not None and args.no_main and not args.growth:
        metrics_benchmark(Path(args.metrics) if args.metrics else unpack_metrics(args.workdir), max(1, args.repeat))
        return 0
    if not BARE.exists():
        raise SystemExit(f"{BARE} is absent: the floor needs ../shared/tools/bare_read.py")
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not set(formats) <= set(FORMATS):
        raise SystemExit(f"--formats: choose from {', '.join(FORMATS)}")
    # The floor is always the SQLite read, so the SQLite trace is needed even for Parquet-only runs.
    traces = {"sqlite": args.trace or unpack_big(args.workdir)}
    if "parquetdir" in formats:
        traces["parquetdir"] = args.parquet or unpack_big_parquet(args.workdir)
    if not args.no_main:
        benchmark(traces, formats, args.repeat)
    if args.growth:
        if not args.no_main:
            print()
        growth(traces, formats, [int(x) for x in args.growth.split(",")], args.workdir, max(1, args.repeat))
    if args.long:
        if not args.no_main or args.growth:
            print()
        sys.path.insert(0, str(HERE))
        from long_case import long_case  # noqa: PLC0415 - a sibling script, not a package

        long_case(traces["sqlite"], [x.strip() for x in args.long.split(",") if x.strip()], args.long_dir,
                  max(1, args.repeat), args.long_args.split())
    if args.shuffled:
        print()
        shuffled_benchmark(traces["sqlite"], args.workdir, max(1, args.repeat))
    if args.metrics is not None:
        print()
        metrics_benchmark(Path(args.metrics) if args.metrics else unpack_metrics(args.workdir), max(1, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
