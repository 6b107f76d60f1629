"""The human table: findings ranked by estimated savings, then severity."""

from __future__ import annotations

import os
import textwrap

from tabulate import tabulate

from ..engine import Report
from ..textsafe import NAME_CHARS, clip
from ..textsafe import terminal_safe


def human_ns(ns: float | int | None) -> str:
    """``1234567`` -> ``1.23 ms``."""
    if ns is None:
        return ""
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def _t(text: object) -> str:
    """One value from the trace (or a message about it) as one visible line: no control character acts."""
    return terminal_safe(str(text), newlines=False)


def format_table(report: Report) -> str:
    """A ranked table per run, then skipped rules and errors."""
    lines: list[str] = []
    for result in report.results:
        info = result.info
        gpus = ", ".join(clip(g["name"], NAME_CHARS) for g in info.get("gpus", [])) or "GPU unknown"
        steady = info.get("window", {}).get("steady", {}).get("source")
        # Exports before nsys 2022.1 name no version: say so, with what the export's shapes suggest.
        version = info.get("nsys_version") or "unknown" + (
            f", inferred {info['nsys_version_inferred']}" if info.get("nsys_version_inferred") else "")
        lines.append(_t(f"{info['path']}  (nsys {version}, {gpus})"))
        if steady:
            lines.append(f"steady state: {_t(steady)}")
        # What the loader dropped or patched: the numbers below cover less than the file.
        lines.extend(f"damaged export: {_t(note)}" for note in info.get("damage", []))
    rows = []
    several = len(report.results) > 1  # many traces: say which one each finding is about
    for i, f in enumerate(report.findings, 1):
        rule = f"{f.rule}\n({_t(os.path.basename(f.location.trace or ''))})" if several and f.location.trace else f.rule
        # Finding texts are bounded (findings.Finding): wrapping a recorded 4 MB command took 83 s.
        rows.append([i, f.severity.value, rule, human_ns(f.estimated_savings_ns),
                     textwrap.fill(_t(clip(f.message)), 70), textwrap.fill(_t(clip(f.recommendation)), 60)])
    if rows:
        lines.append(tabulate(rows, headers=["#", "severity", "rule", "saves", "finding", "next optimization"],
                              tablefmt="simple_grid"))
    else:
        lines.append("no findings")
    skipped = report.all_skipped
    if skipped:
        lines.append("skipped:")
        lines.extend(_t(f"  {s['rule']}: {s['reason']}" + (f"; fix: {s['fix']}" if s.get("fix") else ""))
                     for s in skipped)
    for e in report.all_errors:
        lines.append(_t(f"error: {e.get('rule') or e.get('plugin')}: {e['error']}"))
    if getattr(report, "cross_trace", None):
        from ..parallel import summary_lines

        lines.extend(summary_lines(report.cross_trace))  # type: ignore[arg-type]
    if getattr(report, "job", None) is not None:
        from ..job.run import summary_lines as job_lines

        lines.extend(job_lines(report.job.info))
    s = report.summary()["by_severity"]
    lines.append(f"{s['error']} error(s), {s['warning']} warning(s), {s['info']} info")
    return "\n".join(lines) + "\n"
