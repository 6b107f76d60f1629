"""The human report: each trace's step budget, then the findings ranked, as a table.

The table is laid out for the width it is read at: ``COLUMNS`` or the terminal's width, and
:data:`~nsys_rules.formatters.layout.FILE_WIDTH` (80) when the output is a file or a pipe. Below
:data:`~nsys_rules.formatters.layout.COMPACT_BELOW` columns a table's text columns get too narrow
to read, so the report switches to the compact layout (:mod:`.compact`); ``--format compact``
asks for that layout at any width. A suggested command never wraps inside its cell: one that fits
the cell has a line of its own there, a longer one is printed whole under the table, named from
the cell (``command 2a, below``).
"""

from __future__ import annotations

import re

from tabulate import tabulate

from nsys_rules.report import Report
from nsys_rules.textsafe import clip
from nsys_rules.formatters.layout import (COMPACT_BELOW, Answer, answer, explains_line, fit, one_line, output_width,
                                          savings_note, savings_share, savings_text, trace_name)
from nsys_rules.formatters.wrapping import CODE, fill_cell, is_command, is_command_line
from nsys_rules.formatters.sections import header_lines, tail_lines

__all__ = ["format_table", "findings_table"]

#: Widest the message and recommendation columns get, however wide the terminal (long lines read badly).
MESSAGE_MAX, NEXT_MAX = 90, 70


def format_table(report: Report, width: int | None = None) -> str:
    """The report as a table ``width`` columns wide (default: see the module docstring)."""
    from nsys_rules.formatters.compact import format_compact

    width = width or output_width()
    if width < COMPACT_BELOW:
        return format_compact(report, width)
    ranked = answer(report)
    table = findings_table(ranked, width, several=len(report.results) > 1) if ranked.entries else "no findings"
    if any(len(line) > width and not is_command_line(line) for line in table.split("\n")):
        return format_compact(report, width)  # columns too narrow for what they hold (trace names, long words)
    head, tail = fit(header_lines(report, width), width), fit(tail_lines(report, ranked, width), width)
    if len(report.results) > 1:  # several traces: the ranked findings first, each trace's budget after them
        return "\n".join([table, *head, *tail]) + "\n"
    return "\n".join([*head, table, *tail]) + "\n"


def findings_table(ranked: Answer, width: int, several: bool = False) -> str:
    """The ranked findings as a grid whose lines fit ``width``, then the commands too long for their cell."""
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
    below: list[str] = []
    for row, entry in zip(rows, ranked.entries, strict=True):
        f = entry.finding
        text = _fill(_commands_below(one_line(clip(f.message)), text_w, entry.number, below), text_w)
        note = savings_note(f)
        if note:
            text += _fill(f"savings: {note}", text_w)
        for symptom in entry.explains:
            text += _fill(explains_line(symptom, 2 * text_w), text_w)  # at most two lines
        advice = _commands_below(one_line(clip(f.recommendation)), next_w, entry.number, below)
        row += ["\n".join(text), "\n".join(_fill(advice, next_w))]
    table = tabulate(rows, headers=headers, tablefmt="simple_grid", disable_numparse=True)
    return "\n".join([table, *below])


def _commands_below(text: str, width: int, number: int, below: list[str]) -> str:
    """``text`` with each command wider than its cell replaced by ``(command 2a, below)``; the command
    itself appended to ``below``, a line naming it, then the command alone on its line."""
    letters = iter("abcdefghijklmnopqrstuvwxyz")

    def swap(m: re.Match[str]) -> str:
        code = m.group(1)
        if not is_command(code) or len(code) <= width:
            return m.group(0)
        name = f"{number}{next(letters, '')}"
        below.extend([f"command {name} (finding {number}):", f"  {code}"])
        return f"(command {name}, below)"

    return CODE.sub(swap, text)


def _fill(text: str, width: int) -> list[str]:
    # Finding texts are bounded (findings.Finding), so wrapping them stays cheap whatever the trace recorded.
    return fill_cell(text, width)
