"""Traces built to make costs blow up, and how long ``check`` takes on each (target: under 5 s on 2 cores).

Usage: python benchmarks/attacks.py [--workdir DIR] [--only NAME,...] [--repeat N]

Each trace is written with :class:`nsys_rules.testing.TraceBuilder` into the work folder (never
into the repository) and checked as a whole process, like a user runs it:

* ``names_100k``: 100,000 kernels, every one with its own name (classifier and grouping cost
  per distinct name);
* ``names_crafted``: 3,200 distinct 4.4 KB kernel names made of ``gemm_1_`` repeats (a regex that
  backtracks on them cost 0.1-0.2 s per name: 577 s for such a 14 MB trace);
* ``names_64kb``: 100 distinct kernel names of 64 KB each, in every output format;
* ``nvtx_20k``: 20,000 NVTX step ranges with kernels in each, checked with ``--filter-nvtx``
  (window work once grew with steps x ranges: 26.6 s);
* ``command_1mb`` / ``command_4mb``: a recorded command line of 1 MB / 4 MB (tables laid out
  the whole string: 5-11 s / 83 s), checked in every output format.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import measure, print_table  # noqa: E402 - a sibling script, not a package

from nsys_rules.testing import TraceBuilder  # noqa: E402

T0 = 1_000_000_000
TARGET_S = 5.0


def names_100k(path: Path) -> list[list[str]]:
    b = TraceBuilder()
    for i in range(100_000):
        b.kernel(f"void ns{i % 97}::kernel_{i}<float, {i}>(float const*, int)", T0 + i * 10_000, 4_000)
    b.write(path)
    return [[], ["--format", "json"]]


def names_crafted(path: Path) -> list[list[str]]:
    b = TraceBuilder()
    for i in range(3_200):
        b.kernel(f"k{i}_" + "gemm_1_" * 630, T0 + i * 10_000, 4_000)
    b.write(path)
    return [[], ["--format", "json"]]


def names_64kb(path: Path) -> list[list[str]]:
    b = TraceBuilder()
    for i in range(2_000):  # 100 distinct names of 64 KB (the loader's cut), launched 20 times each
        b.kernel(f"void ns::kernel_{i % 100}<" + "float, " * 9_300 + ">(int)", T0 + i * 10_000, 4_000 + i % 7 * 500)
    b.write(path)
    return [["--format", f] for f in ("table", "markdown", "html", "json")]


def nvtx_20k(path: Path) -> list[list[str]]:
    b = TraceBuilder()
    for i in range(20_000):
        s = T0 + i * 60_000
        b.nvtx("step", s, s + 50_000)
        for j in range(3):
            b.kernel(f"k{j}", s + 10_000 + j * 10_000, 5_000)
    b.write(path)
    return [["--filter-nvtx", "step"], ["--filter-nvtx", "step", "--format", "json"], []]


def _command(path: Path, size: int) -> list[list[str]]:
    b = TraceBuilder(command=("target/debug/app", "--prompt", "x" * size))  # debug build: findings quote it
    for i in range(200):
        b.kernel("gemv_kernel", T0 + i * 10_000, 4_000)
    b.write(path)
    return [["--format", f] for f in ("table", "markdown", "html", "json", "sarif")]


def command_1mb(path: Path) -> list[list[str]]:
    return _command(path, 1 << 20)


def command_4mb(path: Path) -> list[list[str]]:
    return _command(path, 4 << 20)


CASES = {f.__name__: f for f in (names_100k, names_crafted, names_64kb, nvtx_20k, command_1mb, command_4mb)}


def main(argv: list[str] | None = None) -> int:
    """Build the traces (once) and time ``check`` on each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
                        / "nsys-rules-attacks")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0, help="kill a check after this many seconds")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, build in CASES.items():
        if args.only and name not in args.only.split(","):
            continue
        path = args.workdir / f"{name}.sqlite"
        runs = build(path)  # rebuilt each time: cheap next to the checks, and never stale
        for extra in runs:
            argv_ = [sys.executable, "-m", "nsys_rules", "check", str(path), "--fail-on", "never", *extra]
            results = [measure(argv_, timeout=args.timeout) for _ in range(max(1, args.repeat))]
            best = min(results, key=lambda r: r.seconds)
            ok = "ok" if best.seconds < TARGET_S and best.status in (0, 1) else (
                f"exit {best.status}" if best.status not in (0, 1) else "OVER")
            rows.append([name, f"{path.stat().st_size / 1e6:.1f}", " ".join(extra) or "(table)",
                         f"{best.seconds:.2f}", f"{best.rss_mb:.0f}", ok])
    print_table(["trace", "MB", "flags", "seconds", "RSS MB", f"< {TARGET_S:.0f} s"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
