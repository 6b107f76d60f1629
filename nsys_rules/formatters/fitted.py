"""Tables that fit the width they are read at: whole, with their name column cut, or as one block per row.

A table of numbers and names (diff's parts and movers, stats' summaries, the cross-trace kernels)
is printed as it is when it fits. Else its name column is cut to the room the other columns leave
(names kept apart, :func:`~nsys_rules.formatters.short_names.distinct_names`); and when even the
numbers alone do not fit (60 or 80 columns against nine numeric columns) each row becomes a block:
its name on a line, then ``header value`` pairs wrapped under it, no pair split across lines.
"""

from __future__ import annotations

from typing import Sequence

from tabulate import tabulate

from nsys_rules.formatters.short_names import distinct_names
from nsys_rules.formatters.wrapping import wrap_text

#: A name column is not cut below this many characters: under it a name no longer says which kernel.
MIN_NAME = 24
#: Indent of a block's pairs under its name.
PAIR_INDENT = "    "


def widest(lines: Sequence[str]) -> int:
    """The longest of ``lines`` (0 for none)."""
    return max((len(line) for line in lines), default=0)


def fitted_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, name: int = 0) -> list[str]:
    """``rows`` under ``headers`` as tabulate's ``simple`` table of at most ``width`` columns.

    Column ``name`` holds the names: cut to fit when the table is too wide, and the rest laid out
    as blocks (:func:`blocks`) when even a cut name column leaves no room.
    """
    if not rows:
        return []
    lines = _simple(headers, rows)
    if widest(lines) <= width:
        return lines
    others = widest(_simple([h for i, h in enumerate(headers) if i != name],
                            [[c for i, c in enumerate(r) if i != name] for r in rows]))
    room = width - others - 2  # tabulate's two spaces between columns
    if room >= max(MIN_NAME, len(headers[name])):
        short = distinct_names([r[name] for r in rows], room)
        cut = [[short[c] if i == name else c for i, c in enumerate(r)] for r in rows]
        lines = _simple(headers, cut)
        if widest(lines) <= width:
            return lines
    return blocks(headers, rows, width, name)


def blocks(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, name: int = 0) -> list[str]:
    """One block per row: its ``name`` cell (wrapped, never cut), then the other cells as ``header value``."""
    out: list[str] = []
    for row in rows:
        out += wrap_text(str(row[name]), width, "", "  ")
        pairs = [f"{h} {c}".replace(" ", "\xa0") for i, (h, c) in enumerate(zip(headers, row, strict=True))
                 if i != name and str(c).strip()]
        out += [line.replace("\xa0", " ") for line in wrap_text(", ".join(pairs), width, PAIR_INDENT)]
    return out


def _simple(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return str(tabulate([list(r) for r in rows], headers=list(headers), tablefmt="simple")).split("\n")
