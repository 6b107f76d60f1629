"""The HTML report's step timeline (issue 36): the median step as measured and replayed with the shown fixes.

Draws what :mod:`nsys_rules.model.replay_timeline` put in the profile: the launching thread(s)
above the GPU streams, the GPU's idle stretches coloured by the finding that owns them, and below
it the same step replayed with every shown finding's fix, on the same time scale. Inline SVG only.
"""

from __future__ import annotations

from typing import Any

from nsys_rules.formatters.html_charts import CLASS_COLORS
from nsys_rules.formatters.layout import ms
from nsys_rules.textsafe import html_safe

#: Host call kinds' colours.
CALL_COLORS = {"launch": "#64748b", "sync": "#f97316", "allocation": "#eab308", "copy": "#0ea5e9",
               "module load": "#a16207", "other": "#cbd5e1"}
#: Colours of the findings that own idle stretches, in order of first appearance; unowned idle is grey.
OWNER_COLORS = ("#ef4444", "#f59e0b", "#d946ef", "#14b8a6", "#3b82f6", "#84cc16")
UNOWNED = "#e2e8f0"
WIDTH, LABEL, ROW, GAP = 1080, 130, 16, 4


def replay_section(timeline: dict[str, Any]) -> str:
    """The section: the step as measured, then with the fixes, with one legend of owners and classes."""
    measured = timeline.get("as_measured")
    if not measured:
        return ""
    fixed = timeline.get("with_fixes")
    scale = max(int(measured["step_ns"]), int(fixed["step_ns"]) if fixed else 0, 1)
    owners: dict[str, str] = {}
    for picture in (measured, fixed):
        for *_, _part, rule in (picture or {}).get("idle", []):
            if rule and rule not in owners:
                owners[rule] = OWNER_COLORS[len(owners) % len(OWNER_COLORS)]
    out = ["<section><h2>The median step, replayed</h2>",
           f"<p class='sub'>As measured ({ms(timeline['measured_step_ns'])}; its replay {ms(measured['step_ns'])}): "
           "the launching thread's CUDA calls above the GPU streams, the GPU's idle time coloured by the finding "
           "that owns it.</p>", _svg(measured, scale, owners)]
    if fixed:
        fixes = ", ".join(html_safe(r) for r in timeline.get("fixes", []))
        saved = int(measured["step_ns"]) - int(fixed["step_ns"])
        out += [f"<p class='sub'>With the shown fixes ({fixes}): {ms(fixed['step_ns'])} per step, "
                f"{ms(saved)} less.</p>", _svg(fixed, scale, owners)]
    out.append(_legend(owners))
    out.append("</section>")
    return "".join(out)


def _svg(picture: dict[str, Any], scale: int, owners: dict[str, str]) -> str:
    rows = [*picture["rows"], {"label": "GPU idle", "kind": "idle", "spans": picture["idle"]}]
    height = len(rows) * (ROW + GAP)
    span = WIDTH - LABEL
    shapes = []
    for i, row in enumerate(rows):
        y = i * (ROW + GAP)
        shapes.append(f"<text x='0' y='{y + ROW - 4}' font-size='11' fill='#334155'>{html_safe(row['label'])}</text>")
        shapes.append(f"<rect x='{LABEL}' y='{y}' width='{span}' height='{ROW}' fill='#f8fafc'/>")
        for item in row["spans"]:
            a, b, name = int(item[0]), int(item[1]), str(item[2])
            if row["kind"] == "idle":
                rule = str(item[3])
                color = owners.get(rule, UNOWNED)
                tip = f"idle: {name}" + (f", owned by {rule}" if rule else "")
            elif row["kind"] == "host":
                color, tip = CALL_COLORS.get(name, CALL_COLORS["other"]), name
            else:
                color = CLASS_COLORS.get({"copy": "memcpy", "graph replay": "cuda-graph"}.get(name, name),
                                         CLASS_COLORS["other"])
                tip = name
            x = LABEL + span * max(a, 0) / scale
            w = max(span * (min(b, scale) - max(a, 0)) / scale, 0.6)
            if x >= LABEL + span:
                continue
            shapes.append(f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{ROW}' fill='{color}'>"
                          f"<title>{html_safe(tip)}: {ms(max(b - a, 0))}</title></rect>")
    return (f"<svg viewBox='0 0 {WIDTH} {height}' width='100%' role='img' aria-label='the median step as a timeline'>"
            + "".join(shapes) + "</svg>")


def _legend(owners: dict[str, str]) -> str:
    def swatch(color: str, text: str) -> str:
        return (f"<span style='margin-right:14px'><i style='display:inline-block;width:9px;height:9px;"
                f"border-radius:2px;background:{color};margin-right:5px'></i>{html_safe(text)}</span>")

    items = [swatch(c, f"idle owned by {rule}") for rule, c in owners.items()] + [swatch(UNOWNED, "idle, no owner")]
    items += [swatch(c, f"host: {k}") for k, c in CALL_COLORS.items()]
    return f"<p class='sub'>{''.join(items)}</p>"
