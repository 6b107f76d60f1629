"""The activity table's parts (one per GPU table) merged into one table in start order.

The kernels hold nearly every row of a trace's GPU work; copies, memsets and graph replays are
a few rows slotted in among them. Merging by slotting them in, rather than concatenating and
sorting, keeps the peak at the output arrays; the fields most callers read at few rows stay
the kernels' own values with the others spliced in (:class:`~nsys_rules.analysis.spliced.Spliced`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nsys_rules.analysis.intervals import rising
from nsys_rules.analysis.spliced import interleave, splice
from nsys_rules.loaders.columns import ONE_VALUE_ROWS

#: Up to this many rows outside the biggest part are slotted in one by one.
_FEW_SMALL = 64
#: Up to this many rows outside the biggest part are spliced into the fields kept as :class:`~.spliced.Spliced`.
_MAX_SPLICED = 4096
#: Fields kept spliced where they can be: read at few rows, by mask or by comparison with one value.
SPLICED_FIELDS = ("table_row", "corr", "stream", "kind")


def merge_parts(parts: list[dict[str, np.ndarray]], fields: tuple[str, ...], in_order: list[bool] | None = None,
                spliced: tuple[str, ...] = ()) -> dict[str, Any]:
    """The parts (``fields`` -> aligned arrays, one part per GPU table) as one table in start order.

    ``in_order``: which parts are in start order already (tested when None).

    Each part is usually in start order already, and one (the kernels) holds nearly every row:
    the others are slotted in at their places, so the only new arrays are the output ones (a
    concatenation then a sorted copy doubled the peak on a 1M-kernel trace). The fields named in
    ``spliced`` are kept as the biggest part's own values with the others spliced in
    (:class:`~.spliced.Spliced`, no copy) where that part needs no sort and the others are few.
    """
    in_order = [rising(p["start"]) for p in parts] if in_order is None else in_order  # which parts need no sort
    by_size = sorted(range(len(parts)), key=lambda k: -len(parts[k]["start"]))
    parts = [parts[k] for k in by_size]
    big = parts[0]
    if not in_order[by_size[0]]:
        order = np.argsort(big["start"], kind="stable")
        big = {name: values[order] for name, values in big.items()}
    keep = bool(spliced) and in_order[by_size[0]]  # the big part's rows in its frame's order: row numbers 0, 1, ...
    if len(parts) == 1:
        rows = big["table_row"]
        return {**big, "table_row": splice(None, len(rows), rows[:0], rows[:0], rows.dtype)} if keep and (
            "table_row" in spliced) else big
    small = {name: np.concatenate([p[name] for p in parts[1:]]) for name in fields}
    order = np.argsort(small["start"], kind="stable")
    small = {name: values[order] for name, values in small.items()}
    # Final position of each small row: the big rows starting at or before it, plus the small rows before it.
    at = np.searchsorted(big["start"], small["start"], side="right") + np.arange(len(order))
    total = len(big["start"]) + len(order)
    # A few small rows (a handful of copies among a million kernels): the big rows go in as slices
    # between them; many: through a mask.
    is_small = None if len(at) <= _FEW_SMALL else np.zeros(total, bool)
    if is_small is not None:
        is_small[at] = True
    keep = keep and len(at) <= _MAX_SPLICED
    out: dict[str, Any] = {}
    for name in fields:
        dtype = np.result_type(big[name].dtype, small[name].dtype)
        if keep and name in spliced:
            out[name] = splice(None if name == "table_row" else big[name], len(big[name]), at, small[name], dtype)
            continue
        value = big[name][:1]
        if total >= ONE_VALUE_ROWS and big[name].strides == (0,) and (small[name] == value).all():
            out[name] = np.broadcast_to(value.astype(dtype), total)  # one value in every row, as one_value keeps it
            continue
        if is_small is None:
            out[name] = interleave(big[name], at, small[name], dtype)
            continue
        values = np.empty(total, dtype)
        values[at] = small[name]
        values[~is_small] = big[name]
        out[name] = values
    return out
