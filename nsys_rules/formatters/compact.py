"""The compact layout: the human report for terminals narrower than a table needs.

One block per finding, the way ruff and pytest print theirs: a header line (number, severity,
rule, savings), then the message and the next optimization wrapped to the width, then the
symptoms the finding explains. Every line fits the width (``COLUMNS``, the terminal's, or
:data:`~nsys_rules.formatters.layout.COMPACT_FILE_WIDTH`, 80, for a file or a pipe), except a suggested
command: it has a line of its own, whole, however long (:mod:`.wrapping`). With several traces the
ranked findings come first and each trace's budget after them.
"""

from __future__ import annotations

from nsys_rules.report import Report
from nsys_rules.textsafe import clip
from nsys_rules.formatters.layout import (COMPACT_FILE_WIDTH, Answer, Entry, answer, explains_line, fit, one_line, savings_note,
                     savings_share, savings_text, terminal_width, trace_name, wrap)
from nsys_rules.formatters.sections import header_lines, tail_lines

#: Indent of a finding's text under its header line.
INDENT = "    "


def format_compact(report: Report, width: int | None = None) -> str:
    """The report in the compact layout, ``width`` columns wide (default: the terminal's)."""
    width = width or terminal_width() or COMPACT_FILE_WIDTH
    ranked = answer(report)
    blocks = finding_blocks(ranked, width, several=len(report.results) > 1)
    if len(report.results) > 1:  # several traces: the ranked findings first, each trace's budget after them
        lines = [*blocks, *header_lines(report, width), "", *tail_lines(report, ranked, width)]
    else:
        lines = [*header_lines(report, width), "", *blocks, *tail_lines(report, ranked, width)]
    return "\n".join(fit(lines, width)) + "\n"


def finding_blocks(ranked: Answer, width: int, several: bool = False) -> list[str]:
    """Every shown finding as a block; "no findings" when there is none."""
    if not ranked.entries:
        return ["no findings"]
    out: list[str] = []
    for entry in ranked.entries:
        out += block(entry, width, several)
        out.append("")
    return out


def block(entry: Entry, width: int, several: bool = False) -> list[str]:
    """One finding: ``N. severity  rule  [trace]  saves X (Y % of steady time)``, then its text."""
    f = entry.finding
    head = [f"{entry.number:>2}. {f.severity.value:<7}", f.rule]
    if several and f.location.trace:
        head.append(f"[{trace_name(f)}]")
    saves = savings_text(f)
    if saves:
        share = savings_share(entry)
        head.append(f"saves {saves}" + (f" ({share})" if share else ""))
    out = header_pieces(head, width)
    out += wrap(one_line(clip(f.message)), width, INDENT)
    note = savings_note(f)
    if note:
        out += wrap(f"savings: {note}", width, INDENT, INDENT + "  ")
    out += wrap(f"next: {one_line(clip(f.recommendation))}", width, INDENT, INDENT + "  ")
    for symptom in entry.explains:
        out += wrap(explains_line(symptom, width - len(INDENT)), width, INDENT, INDENT + "  ")
    return out


def header_pieces(pieces: list[str], width: int) -> list[str]:
    """A finding's header: ``pieces`` two spaces apart, each whole on a line; a new line (under
    :data:`INDENT`) where the next piece would pass ``width``, and a piece longer than a line wrapped."""
    out = [pieces[0]]
    for piece in pieces[1:]:
        if len(out[-1]) + 2 + len(piece) <= width:
            out[-1] += "  " + piece
        else:
            out += wrap(piece, width, INDENT)
    return out
