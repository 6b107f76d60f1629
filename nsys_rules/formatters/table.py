"""The human report: each trace's step budget, then the findings ranked, as a table.

The table is laid out for the width it is read at: ``COLUMNS`` or the terminal's width, and
:data:`~nsys_rules.formatters.layout.FILE_WIDTH` when the output is a file or a pipe. Below
:data:`~nsys_rules.formatters.layout.COMPACT_BELOW` columns a table's text columns get too narrow
to read, so the report switches to the compact layout (:mod:`.compact`); ``--format compact``
asks for that layout at any width.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

from tabulate import tabulate

from ..engine import Report
from ..textsafe import clip
from .layout import (COMPACT_BELOW, FILE_WIDTH, NO_CUDA, Answer, answer, budget_lines, explains_line, fit, gpu_names,
                     human_ns, one_line, savings_note, savings_share, savings_text, shorten, skipped_lines,
                     terminal_width, trace_name)

__all__ = ["format_table", "human_ns", "header_lines", "tail_lines"]

#: Widest the message and recommendation columns get, however wide the terminal (long lines read badly).
MESSAGE_MAX, NEXT_MAX = 90, 70


def format_table(report: Report, width: int | None = None) -> str:
    """The report as a table ``width`` columns wide (default: see the module docstring)."""
    width = width or terminal_width()
    if width is not None and width < COMPACT_BELOW:
        from .compact import format_compact

        return format_compact(report, width)
    width = width or FILE_WIDTH
    ranked = answer(report)
    table = findings_table(ranked, width, several=len(report.results) > 1) if ranked.entries else "no findings"
    lines = [*fit(header_lines(report, width), width), table, *fit(tail_lines(report, ranked, width), width)]
    return "\n".join(lines) + "\n"


def header_lines(report: Report, width: int) -> list[str]:
    """Per trace: what it is, its steady state, and its step budget (before any finding)."""
    lines: list[str] = []
    for i, result in enumerate(report.results):
        info = result.info
        if i:
            lines.append("")
        # Exports before nsys 2022.1 name no version: say so, with what the export's shapes suggest.
        version = info.get("nsys_version") or "unknown" + (
            f", inferred {info['nsys_version_inferred']}" if info.get("nsys_version_inferred") else "")
        lines.append(f"{one_line(info['path'])}  (nsys {one_line(version)}, {gpu_names(info)})")
        # What the loader dropped or patched: the numbers below cover less than the file.
        lines.extend(f"damaged export: {one_line(note)}" for note in info.get("damage", []))
        if not result.has_cuda:
            lines.append(NO_CUDA)
            continue
        steady = info.get("window", {}).get("steady", {}).get("source")
        if steady:
            lines.append(f"steady state: {one_line(steady)}")
        lines += budget_lines(info, label_width=min(40, max(24, width - 38)))
    return lines


def tail_lines(report: Report, ranked: Answer, width: int) -> list[str]:
    """After the findings: the minor ones, skipped rules, errors, the cross-trace and job summaries, the counts."""
    lines: list[str] = []
    minor = ranked.minor_line()
    if minor:
        lines.append(minor)
    lines += skipped_lines(report, report.verbose)
    for e in report.all_errors:
        lines.append(one_line(f"error: {e.get('rule') or e.get('plugin')}: {e['error']}"))
    if report.cross_trace:
        lines.extend(cross_trace_lines(report.cross_trace, width))
    if report.job is not None:
        from ..job.run import summary_lines as job_lines

        lines.extend(job_lines(report.job.info))
    s = report.summary()["by_severity"]
    lines.append(f"{s['error']} error(s), {s['warning']} warning(s), {s['info']} info")
    return lines


def cross_trace_lines(summary: dict[str, Any], width: int) -> list[str]:
    """The cross-trace summary; its kernel table as one short block per kernel when the table is too wide."""
    from ..parallel import summary_lines

    lines = summary_lines(summary)
    if all(len(line) <= width for text in lines for line in text.split("\n")):
        return lines
    out = lines[:1] + ["kernels shared by the traces, by the slowest trace's excess over the median:"]
    for k in summary["kernels"]:
        ratio = f" ({k['max_over_median']:.2f}x)" if k.get("max_over_median") else ""
        out.append(f"  {shorten(one_line(k['kernel']), max(20, width - 4))}")
        out.append(f"    median {human_ns(k['median_ns'])}, max {human_ns(k['max_ns'])}{ratio}, excess "
                   f"{human_ns(k['excess_ns'])} in {one_line(os.path.basename(str(k['slowest'])))}")
    return out


def findings_table(ranked: Answer, width: int, several: bool = False) -> str:
    """The ranked findings as a grid whose lines fit ``width``."""
    headers = ["#", "severity", "rule", "saves", "finding", "next optimization"]
    rows = []
    for entry in ranked.entries:
        f = entry.finding
        rule = f"{f.rule}\n({trace_name(f)})" if several and f.location.trace else f.rule
        saves = "\n".join(x for x in (savings_text(f), savings_share(entry)) if x)
        rows.append([str(entry.number), f.severity.value, rule, saves])
    # tabulate makes a column at least its header plus 2 characters wide.
    fixed = [max([len(h) + 2] + [len(line) for r in rows for line in r[i].split("\n")])
             for i, h in enumerate(headers[:4])]
    # simple_grid: "│ " + " │ " between the six columns + " │", each cell padded by one space per side.
    room = max(20, width - sum(fixed) - 3 * 5 - 4)
    text_w = min(MESSAGE_MAX, max(10, room * 11 // 20))
    next_w = min(NEXT_MAX, max(len(headers[5]) + 2, room - text_w))
    for row, entry in zip(rows, ranked.entries, strict=True):
        f = entry.finding
        text = _fill(one_line(clip(f.message)), text_w)
        note = savings_note(f)
        if note:
            text += _fill(f"savings: {note}", text_w)
        for symptom in entry.explains:
            text += _fill(explains_line(symptom, 2 * text_w), text_w)  # at most two lines
        row += ["\n".join(text), "\n".join(_fill(one_line(clip(f.recommendation)), next_w))]
    return tabulate(rows, headers=headers, tablefmt="simple_grid", disable_numparse=True)


def _fill(text: str, width: int) -> list[str]:
    # Finding texts are bounded (findings.Finding): wrapping a recorded 4 MB command took 83 s.
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]
