"""Snapshot `check --format json` over every trace we have, and compare two snapshots.

A change that should not move results (a refactor, a speed-up) is checked by taking a snapshot
before and after it and comparing them: the JSON must be byte-identical on every case.

Usage:
    python tools/json_snapshot.py take OUTDIR [--cache DIR] [--jobs N] [--only SUBSTR]
    python tools/json_snapshot.py compare OLDDIR NEWDIR

Cases: the 17 H200 traces, the repository's captured traces (tests/data, xz unpacked into the
cache folder), the public corpus (plain, converted, and its xz files), the Python-sampling and
diff traces, and the small export in its three formats. ``--with-metrics`` adds the three GPU-metrics
traces (large). Each case is one JSON file named after the trace; the exit code is kept beside it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NSYS_RULES_SHARED", ROOT.parent / "shared"))


def _unxz(source: Path, cache: Path) -> Path:
    target = cache / source.name[: -len(".xz")]
    if not target.exists():
        tmp = target.with_suffix(target.suffix + ".part")
        with lzma.open(source) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.rename(target)
    return target


def _untar(source: Path, cache: Path, name: str) -> Path:
    target = cache / name
    if not target.exists():
        target.mkdir(parents=True)
        with tarfile.open(source) as archive:
            archive.extractall(target, filter="data")
    return target


def cases(cache: Path, with_metrics: bool) -> dict[str, Path]:
    """Case name -> trace path, in a stable order."""
    out: dict[str, Path] = {}
    for path in sorted((SHARED / "traces" / "h200").glob("*.sqlite")):
        out[f"h200__{path.stem}"] = path
    for path in sorted((ROOT / "tests" / "data").rglob("*.sqlite")):
        out[f"data__{path.parent.name}__{path.stem}"] = path
    for path in sorted((ROOT / "tests" / "data").rglob("*.sqlite.xz")):
        out[f"data__{path.parent.name}__{path.name[:-10]}"] = _unxz(path, cache)
    corpus = SHARED / "corpus" / "public"
    for path in sorted(corpus.glob("*.sqlite")):
        out[f"corpus__{path.stem}"] = path
    for path in sorted((corpus / "converted").glob("*.sqlite")):
        out[f"converted__{path.stem}"] = path
    for folder in (corpus / "big", corpus / "converted" / "big"):
        for path in sorted(folder.glob("*.sqlite.xz")):
            out[f"corpusbig__{path.name[:-10]}"] = _unxz(path, cache)
    for path in sorted((SHARED / "traces" / "python").glob("*.sqlite.xz")):
        out[f"python__{path.name[:-10]}"] = _unxz(path, cache)
    diff = SHARED / "traces" / "diff" / "diff_runs.tar.xz"
    if diff.exists():
        for path in sorted(_untar(diff, cache, "diff").glob("*.sqlite")):
            out[f"diff__{path.stem}"] = path
    formats = SHARED / "traces" / "formats" / "pq_small.tar.xz"
    if formats.exists():
        folder = _untar(formats, cache, "formats")
        for path in sorted(folder.iterdir()):
            out[f"formats__{path.name.replace('.', '_')}"] = path
    if with_metrics:
        for path in sorted((cache / "metrics").glob("*.sqlite")):
            out[f"metrics__{path.stem}"] = path
    return out


def _run(name: str, path: Path, outdir: Path) -> tuple[str, int]:
    proc = subprocess.run([sys.executable, "-m", "nsys_rules", "check", "--format", "json", str(path)],
                          capture_output=True, text=True, env={**os.environ, "NSYS_RULES_RULE_THREADS": "1"})
    (outdir / f"{name}.json").write_text(proc.stdout)
    (outdir / f"{name}.rc").write_text(f"{proc.returncode}\n{proc.stderr}")
    return name, proc.returncode


def take(outdir: Path, cache: Path, jobs: int, only: str | None, with_metrics: bool) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    todo = {n: p for n, p in cases(cache, with_metrics).items() if not only or only in n}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, rc in pool.map(lambda item: _run(item[0], item[1], outdir), todo.items()):
            print(f"{rc}  {name}")
    print(f"{len(todo)} cases in {outdir}")
    return 0


def compare(old: Path, new: Path) -> int:
    names = sorted({p.name for p in old.iterdir()} | {p.name for p in new.iterdir()})
    differ = [n for n in names if not (old / n).exists() or not (new / n).exists()
              or (old / n).read_bytes() != (new / n).read_bytes()]
    for name in differ:
        print(f"differs: {name}")
    print(f"{len(names) // 2} cases, {len(differ)} files differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("take")
    t.add_argument("outdir", type=Path)
    t.add_argument("--cache", type=Path, default=ROOT.parent / "cache")
    t.add_argument("--jobs", type=int, default=2)
    t.add_argument("--only")
    t.add_argument("--with-metrics", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "take":
        return take(args.outdir, args.cache, args.jobs, args.only, args.with_metrics)
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
