"""The budget's measured activity (``budget.metrics``, from the trace's GPU metrics) as the human formats show it.

One row per part the GPU metrics sampled, in the budget's order: each metric's level while the part
runs, in percent of the unit's peak (``-`` where the part's time was too short or too entangled with
another part's to measure), and what bounds the part. Selects and words; computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsys_rules.units import plain_number
from nsys_rules.records import TraceInfo

#: The columns, in order: metric key and header. ``compact`` keeps the first of them and the bound.
COLUMNS = (("dram_read", "DRAM rd"), ("dram_write", "DRAM wr"), ("sm_active", "SM act"), ("sm_issue", "issue"),
           ("tensor_active", "tensor"), ("pcie_rx", "PCIe rx"), ("pcie_tx", "PCIe tx"))
COMPACT = ("dram_read", "tensor_active")
#: How the bound reads in a table cell.
BOUND = {"memory": "memory-bound", "compute": "compute-bound", "memory+compute": "memory+compute",
         "latency": "latency-bound"}
IDLE_LABEL = "idle (every idle part)"


@dataclass(frozen=True)
class MeasuredRow:
    """One part as measured: its label, its levels by metric (None: unresolved), its bound and its words."""

    name: str
    label: str
    share: float
    levels: dict[str, float | None]
    bound: str
    words: str


@dataclass(frozen=True)
class MeasuredView:
    """The measured activity of a trace's steady steps, or why there is none (``reason``)."""

    headline: str
    rows: tuple[MeasuredRow, ...]
    columns: tuple[tuple[str, str], ...]
    reason: str | None = None


def measured_view(info: TraceInfo) -> MeasuredView | None:
    """The view of ``info.budget.metrics``; None when the trace has no GPU metrics."""
    metrics: dict[str, Any] | None = (info.budget or {}).get("metrics")
    if not metrics:
        return None
    if not metrics.get("measured"):
        return MeasuredView("", (), (), str(metrics.get("reason") or "not measured"))
    labels = {p["name"]: p["label"] for p in (info.budget or {}).get("parts", [])}
    labels.update({"idle": IDLE_LABEL, "contention": labels.get("contention", "other streams/processes")})
    parts = [p for p in metrics.get("parts", []) if p.get("pct")]
    present = {k for p in parts for k in p["pct"]} | {k for p in parts for k in p.get("unresolved", [])}
    columns = tuple(c for c in COLUMNS if c[0] in present)
    rows = tuple(MeasuredRow(p["name"], labels.get(p["name"], p["name"]), float(p.get("share", 0.0)),
                             {k: p["pct"].get(k) for k, _ in columns}, BOUND.get(p.get("bound", ""), ""),
                             str(p.get("bound_words", ""))) for p in parts)
    freq = metrics.get("frequency_hz")
    rate = f" at {plain_number(freq / 1000, 6)} kHz" if freq else ""
    peak = metrics.get("peak_dram_bytes_per_s")
    peak_text = f"; DRAM peak {peak / 1e12:.2f} TB/s" if peak else ""
    headline = (f"measured while each part runs (GPU metrics, {metrics.get('samples', 0)} samples{rate}, % of each "
                f"unit's peak{peak_text}; - : too short to separate):")
    return MeasuredView(headline, rows, columns)


def measured_lines(info: TraceInfo, label_width: int = 40, width: int | None = None) -> list[str]:
    """The view as plain-text lines (table and compact layouts); empty without GPU metrics."""
    view = measured_view(info)
    if view is None:
        return []
    if view.reason is not None:
        return [f"GPU metrics: not measured ({view.reason})"]
    full = width is None or width >= label_width + 2 + 8 * len(view.columns) + 16
    columns = view.columns if full else tuple(c for c in view.columns if c[0] in COMPACT)
    out = [view.headline, f"  {'part':<{label_width}}" + "".join(f"{h:>8}" for _, h in columns) + "  bound"]
    for row in view.rows:
        label = row.label if len(row.label) <= label_width else row.label[: label_width - 1] + "…"
        cells = "".join(f"{_pct(row.levels.get(k)):>8}" for k, _ in columns)
        out.append(f"  {label:<{label_width}}{cells}  {row.bound}".rstrip())
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def pct_text(value: float | None) -> str:
    """A level as a table cell: ``82 %``, or ``-`` when unresolved."""
    return _pct(value)
