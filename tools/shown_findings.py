"""How many findings a reader is shown per trace, and the verdicts of a folder's expected.json.

Usage:
    python tools/shown_findings.py TRACE_DIR [TRACE_DIR ...] [--save DIR] [--jobs N] [--detail]

For each ``*.sqlite`` (or ``*.sqlite.xz``, unpacked into a cache) of each folder it runs
``nsys-rules check --format json --fail-on never`` and counts the findings the table formatter
lists as numbered entries: neither minor nor folded into another finding (a folded one whose cause
is not in the report counts, as the table shows it on its own). Where the folder has an
``expected.json`` its verdicts are checked with ``tests.capture_verdicts.verdict_problems``
(``must``, ``must_not``, ``message_re``, ``must_any``, ``any_finding_not_re``). Prints one line per
trace, the mean shown count per folder, and the verdict tally; ``--detail`` lists the shown findings.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.capture_verdicts import verdict_problems  # noqa: E402


def shown(findings: list[dict]) -> list[dict]:
    """The findings the table numbers: not minor, not folded (unless their cause is absent)."""
    prints = {f["fingerprint"] for f in findings}
    return [f for f in findings if not f.get("minor") and (not f.get("folded_into") or f["folded_into"] not in prints)]


def _trace(path: Path, cache: Path) -> Path:
    if path.suffix != ".xz":
        return path
    target = cache / path.name[:-3]
    if not target.exists():
        with lzma.open(path) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    return target


def _check(path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "nsys_rules.cli", "check", "--format", "json", "--fail-on", "never",
                           str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"], "findings": []}
    return json.loads(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--save", type=Path, help="write each report's JSON here")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--detail", action="store_true")
    args = ap.parse_args()
    cache = Path(tempfile.gettempdir()) / "nsys-rules-shown-cache"
    cache.mkdir(exist_ok=True)
    bad = total = 0
    for folder in args.folders:
        paths = sorted(folder.glob("*.sqlite")) + sorted(folder.glob("*.sqlite.xz"))
        spec_file = folder / "expected.json"
        expected = json.loads(spec_file.read_text()) if spec_file.exists() else {}
        # Verdicts revised after measuring (tests/data/framework) apply over the as-written ones.
        spec = {name: {**exp, **{k: v for k, v in expected.get("revised", {}).get(name, {}).items() if k != "why"}}
                for name, exp in expected.get("traces", {}).items()}
        traces = [_trace(p, cache) for p in paths]
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            reports = list(pool.map(_check, traces))
        counts = []
        print(f"== {folder}")
        for path, report in zip(traces, reports, strict=True):
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{path.name}.json").write_text(json.dumps(report, indent=1))
            seen = shown(report["findings"])
            counts.append(len(seen))
            problems = report.get("error") or (verdict_problems(report["findings"], spec[path.name])
                                               if path.name in spec else None)
            verdict = "" if problems is None else ("  ok" if not problems else f"  FAIL {problems}")
            if problems is not None:
                total += 1
                bad += bool(problems)
            print(f"{path.name:36s} shown {len(seen)}: {', '.join(f['rule'] for f in seen)}{verdict}")
            if args.detail:
                for f in seen:
                    print(f"    {f['severity']:8s} {f['rule']:22s} {f['message'][:150]}")
        if counts:
            print(f"   mean shown {sum(counts) / len(counts):.2f} over {len(counts)} traces")
    if total:
        print(f"verdicts: {total - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
