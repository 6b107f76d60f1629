"""The human report: each trace's step budget, then the findings ranked, as a table.

The table is laid out for the width it is read at: ``COLUMNS`` or the terminal's width, and
:data:`~nsys_rules.formatters.layout.FILE_WIDTH` when the output is a file or a pipe. Below
:data:`~nsys_rules.formatters.layout.COMPACT_BELOW` columns a table's text columns get too narrow
to read, so the report switches to the compact layout (:mod:`.compact`); ``--format compact``
asks for that layout at any width.
"""

from __future__ import annotations

import textwrap

from tabulate import tabulate

from nsys_rules.report import Report
from nsys_rules.textsafe import clip
from nsys_rules.formatters.layout import (COMPACT_BELOW, FILE_WIDTH, Answer, answer, explains_line, fit, one_line,
                                          savings_note, savings_share, savings_text, terminal_width, trace_name)
from nsys_rules.formatters.sections import header_lines, tail_lines

__all__ = ["format_table", "findings_table"]

#: Widest the message and recommendation columns get, however wide the terminal (long lines read badly).
MESSAGE_MAX, NEXT_MAX = 90, 70


def format_table(report: Report, width: int | None = None) -> str:
    """The report as a table ``width`` columns wide (default: see the module docstring)."""
    width = width or terminal_width()
    if width is not None and width < COMPACT_BELOW:
        from nsys_rules.formatters.compact import format_compact

        return format_compact(report, width)
    width = width or FILE_WIDTH
    ranked = answer(report)
    table = findings_table(ranked, width, several=len(report.results) > 1) if ranked.entries else "no findings"
    lines = [*fit(header_lines(report, width), width), table, *fit(tail_lines(report, ranked, width), width)]
    return "\n".join(lines) + "\n"


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
    # Finding texts are bounded (findings.Finding), so wrapping them stays cheap whatever the trace recorded.
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]
