"""The charts of the HTML report, drawn from the steady-state profile: GPU time by kernel class and by kernel,
busy vs idle per step, and the duration histograms of the kernels findings point at. Inline SVG only.
"""

from __future__ import annotations

from typing import Any, Iterable

from nsys_rules.textsafe import NAME_CHARS as LONG_NAME
from nsys_rules.textsafe import clip, html_safe
from nsys_rules.units import human_ns

#: Colour of each kernel class (taxonomy classes plus copy-engine work).
CLASS_COLORS = {
    "gemv": "#4f7cff", "gemm": "#8b5cf6", "attention": "#ec4899", "norm": "#f59e0b", "elementwise": "#10b981",
    "reduce": "#06b6d4", "memory": "#84cc16", "communication": "#f97316", "memcpy": "#64748b", "memset": "#94a3b8",
    "cuda-graph": "#a855f7", "other": "#cbd5e1",
}
#: Kernels in the table; names are cut to NAME_CHARS (the full name is the cell's tooltip).
TOP_KERNELS = 12
NAME_CHARS = 96


def classes_section(p: dict[str, Any]) -> str:
    classes = [c for c in p["classes"] if c["total_ns"] > 0]
    if not classes:
        return "<section><h2>GPU time by kernel class</h2><p class='empty'>No GPU work in the steady state.</p></section>"
    width, height = 1080, 34
    x, rects = 0.0, []
    for c in classes:
        w = width * c["share"]
        color = CLASS_COLORS.get(c["class"], "#cbd5e1")
        rects.append(f"<rect x='{x:.2f}' y='0' width='{max(w, 0.5):.2f}' height='{height}' fill='{color}'>"
                     f"<title>{html_safe(c['class'])}: {human_ns(c['per_step_ns'])} per step "
                     f"({100 * c['share']:.1f} %)</title></rect>")
        if w > 70:
            rects.append(f"<text x='{x + 8:.1f}' y='21' style='fill:#fff;font-weight:600'>{html_safe(c['class'])} "
                         f"{100 * c['share']:.0f}%</text>")
        x += w
    legend = "".join(f"<span><i style='background:{CLASS_COLORS.get(c['class'], '#cbd5e1')}'></i>{html_safe(c['class'])} "
                     f"{human_ns(c['per_step_ns'])}/step · {100 * c['share']:.1f} %</span>" for c in classes)
    svg = (f"<svg viewBox='0 0 {width} {height}' width='100%' role='img' aria-label='GPU time by kernel class' "
           f"style='border-radius:8px;overflow:hidden'>{''.join(rects)}</svg>")
    top = max(k["share"] for k in p["kernels"]) if p["kernels"] else 1.0
    rows = "".join(
        f"<tr><td class='mono' title='{html_safe(clip(k['name'], LONG_NAME))}'>{html_safe(short_name(k['name']))}</td>"
        f"<td class='c'><i style='display:inline-block;width:9px;height:9px;"
        f"border-radius:2px;background:{CLASS_COLORS.get(k['class'], '#cbd5e1')};margin-right:5px'></i>"
        f"{html_safe(k['class'])}</td><td class='n'>{human_ns(k['per_step_ns'])}</td><td class='n'>{k['count']:,}</td>"
        f"<td class='n'>{human_ns(k['median_ns'])}</td><td class='n'>{human_ns(k['max_ns'])}</td>"
        f"<td><div class='bar'><span style='width:{100 * k['share'] / (top or 1):.1f}%;"
        f"background:{CLASS_COLORS.get(k['class'], '#cbd5e1')}'></span></div>"
        f"<span class='s'>{100 * k['share']:.1f} %</span></td></tr>" for k in p["kernels"][:TOP_KERNELS])
    table = ("<h3>Top kernels</h3><table><tr><th>kernel</th><th>class</th><th class='n'>per step</th><th class='n'>calls</th>"
             "<th class='n'>median</th><th class='n'>max</th><th>share of GPU time</th></tr>" + rows + "</table>")
    return (f"<section><h2>GPU time by kernel class</h2><p class='sub'>{human_ns(p['gpu_time_per_step_ns'])} of GPU work "
            f"per step, summed over streams</p>{svg}<div class='legend'>{legend}</div>{table}</section>")


def timeline_section(p: dict[str, Any]) -> str:
    rows = p["timeline"]["rows"]
    if not rows:
        return ("<section><h2>Steady-state timeline</h2><p class='empty'>No repeating step range (NVTX) was found, so "
                "there is no per-step view; mark steps with an NVTX range to get one.</p></section>")
    width, height, left, bottom = 1080, 240, 54, 26
    plot_w, plot_h = width - left - 10, height - bottom - 12
    peak = max(r["wall_ns"] for r in rows) or 1
    slot = plot_w / len(rows)
    bar = max(1.0, slot * 0.78)
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = 12 + plot_h * (1 - tick)
        parts.append(f"<line x1='{left}' x2='{width - 10}' y1='{y:.1f}' y2='{y:.1f}' stroke='#e2e8f0'/>"
                     f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>{human_ns(peak * tick)}</text>")
    for i, r in enumerate(rows):
        x = left + i * slot + (slot - bar) / 2
        busy_h = plot_h * r["busy_ns"] / peak
        idle_h = plot_h * r["idle_ns"] / peak
        base = 12 + plot_h
        tip = (f"step {r['step']}: wall {human_ns(r['wall_ns'])}, busy {human_ns(r['busy_ns'])}, "
               f"idle {human_ns(r['idle_ns'])}")
        parts.append(f"<g><title>{html_safe(tip)}</title>"
                     f"<rect x='{x:.2f}' y='{base - busy_h:.2f}' width='{bar:.2f}' height='{busy_h:.2f}' fill='var(--busy)'/>"
                     f"<rect x='{x:.2f}' y='{base - busy_h - idle_h:.2f}' width='{bar:.2f}' height='{idle_h:.2f}' "
                     f"fill='var(--idle)'/></g>")
    step_label_every = max(1, len(rows) // 12)
    for i, r in enumerate(rows):
        if i % step_label_every == 0:
            parts.append(f"<text x='{left + (i + 0.5) * slot:.1f}' y='{height - 8}' text-anchor='middle'>{r['step']}</text>")
    svg = (f"<svg viewBox='0 0 {width} {height}' width='100%' role='img' aria-label='busy and idle GPU time per step'>"
           + "".join(parts) + "</svg>")
    note = "" if p["timeline"]["complete"] else f" (every step is not drawn: {len(rows)} of {p['steps']} evenly spread)"
    svg += _metrics_strip(rows, p.get("gpu_metrics"), width, left, slot, bar)
    svg += _step_strip(p["timeline"].get("typical"))
    return (f"<section><h2>Steady-state timeline: busy vs idle per step</h2><p class='sub'>{p['steps']} steps of "
            f"{html_safe(str(p['step_range']))}, wall time on the GPU clock{note}; GPU busy "
            f"{100.0 * p['busy_share']:.0f} % of the step</p>{svg}"
            "<div class='legend'><span><i style='background:var(--busy)'></i>GPU busy</span>"
            "<span><i style='background:var(--idle)'></i>GPU idle (gaps: host, launches, syncs)</span></div></section>")


#: The per-step lanes under the timeline when the trace has GPU metrics: metric key, label, colour.
METRIC_LANES = (("dram_read", "DRAM read", "#0ea5e9"), ("tensor_active", "tensor active", "#a855f7"))


def _metrics_strip(rows: list[dict[str, Any]], strip: dict[str, list[float | None]] | None, width: int, left: int,
                   slot: float, bar: float) -> str:
    """Per step, under the busy/idle bars: its mean DRAM read and tensor activity (percent of peak, GPU metrics)."""
    lanes = [lane for lane in METRIC_LANES if strip and strip.get(lane[0])]
    if not lanes or strip is None:
        return ""
    lane_h, gap = 34, 8
    parts = []
    for n, (key, label, color) in enumerate(lanes):
        top = n * (lane_h + gap) + 4
        values = strip[key]
        parts.append(f"<rect x='{left}' y='{top}' width='{width - left - 10}' height='{lane_h}' fill='#f8fafc' "
                     f"stroke='#e2e8f0'/><text x='{left - 6}' y='{top + lane_h / 2 + 4:.1f}' text-anchor='end'>"
                     f"{html_safe(label.split()[0])}</text>")
        for i, r in enumerate(rows):
            step = r["step"]  # numbered from 1; the lane's values are indexed from 0
            value = values[step - 1] if step <= len(values) else None
            if value is None:
                continue
            h = lane_h * min(max(value, 0.0), 100.0) / 100.0
            x = left + i * slot + (slot - bar) / 2
            parts.append(f"<rect x='{x:.2f}' y='{top + lane_h - h:.2f}' width='{bar:.2f}' height='{max(h, 0.5):.2f}' "
                         f"fill='{color}'><title>step {step}: {html_safe(label)} {value:.1f} % of peak</title></rect>")
    height = len(lanes) * (lane_h + gap)
    legend = "".join(f"<span><i style='background:{color}'></i>{html_safe(label)} (mean over the step, % of peak; "
                     "lane top = 100 %)</span>" for _, label, color in lanes)
    return (f"<h3>GPU metrics per step (measured)</h3><svg viewBox='0 0 {width} {height}' width='100%' role='img' "
            f"aria-label='DRAM and tensor activity per step'>{''.join(parts)}</svg><div class='legend'>{legend}</div>")


def _step_strip(detail: dict[str, Any] | None) -> str:
    """The typical step up close: every GPU operation on one time axis, coloured by class; white is idle."""
    if not detail or not detail["ops"] or detail["wall_ns"] <= 0:
        return ""
    width, lane, left = 1080, 38, 54
    span = detail["wall_ns"]
    scale = (width - left - 10) / span
    parts = [f"<rect x='{left}' y='8' width='{width - left - 10}' height='{lane}' fill='#fff' stroke='#e2e8f0'/>"]
    for offset, dur, cls in detail["ops"]:
        x = left + offset * scale
        if x > width - 10:
            break
        parts.append(f"<rect x='{x:.2f}' y='8' width='{max(dur * scale, 0.6):.2f}' height='{lane}' "
                     f"fill='{CLASS_COLORS.get(cls, '#cbd5e1')}'><title>{html_safe(cls)} {human_ns(dur)} at "
                     f"+{human_ns(offset)}</title></rect>")
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + (width - left - 10) * tick
        anchor = "start" if tick == 0 else "end" if tick == 1 else "middle"
        parts.append(f"<text x='{x:.1f}' y='{lane + 24}' text-anchor='{anchor}'>{human_ns(span * tick)}</text>")
    more = " (first operations only)" if detail.get("truncated") else ""
    return (f"<h3>One step up close: step {detail['step']} (the median step), {human_ns(span)} on the GPU clock{more}; "
            f"coloured by kernel class, white is idle</h3>"
            f"<svg viewBox='0 0 {width} {lane + 30}' width='100%' role='img' aria-label='GPU work in one step'>"
            + "".join(parts) + "</svg>")


def distributions_section(p: dict[str, Any]) -> str:
    dists = p.get("distributions") or []
    if not dists:
        return ""
    return ("<section><h2>Duration distributions of flagged kernels</h2><p class='sub'>log-spaced bins; "
            "markers at p50 and p99</p><div class='grid2'>" + "".join(_histogram(d, 1040 if len(dists) == 1 else 520)
                                                                for d in dists) + "</div></section>")


def _histogram(d: dict[str, Any], width: int = 520) -> str:
    height, pad = 170, 8
    counts, edges = d["counts"], d["edges_ns"]
    peak = max(counts) or 1
    n = len(counts)
    slot = (width - 2 * pad) / max(n, 1)
    parts = []
    for i, c in enumerate(counts):
        h = (height - 40) * c / peak
        parts.append(f"<rect x='{pad + i * slot + 1:.1f}' y='{height - 28 - h:.1f}' width='{max(slot - 2, 1):.1f}' "
                     f"height='{h:.1f}' rx='2' fill='#4f7cff'><title>{human_ns(edges[i])}–{human_ns(edges[i + 1])}: "
                     f"{c} launches</title></rect>")
    for key, color in (("p50_ns", "#10b981"), ("p99_ns", "#dc2626")):
        x = _position(d[key], edges, pad, slot)
        right = x > width * 0.75  # keep the label inside the plot
        label_y = 16 if key == "p50_ns" else 30
        parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='6' y2='{height - 28}' stroke='{color}' stroke-width='2' "
                     f"stroke-dasharray='4 3'/><text x='{x - 4 if right else x + 4:.1f}' y='{label_y}' "
                     f"text-anchor='{'end' if right else 'start'}' style='fill:{color};font-weight:600'>"
                     f"{key[:3]} {human_ns(d[key])}</text>")
    parts.append(f"<text x='{pad}' y='{height - 10}'>{human_ns(edges[0])}</text>"
                 f"<text x='{width - pad}' y='{height - 10}' text-anchor='end'>{human_ns(edges[-1])}</text>")
    svg = f"<svg viewBox='0 0 {width} {height}' width='100%' role='img' aria-label='duration histogram'>{''.join(parts)}</svg>"
    return (f"<div class='dist'><div class='mono'>{html_safe(clip(d['kernel'], LONG_NAME))}</div>"
            f"<div class='s'>{d['count']:,} launches · "
            f"p50 {human_ns(d['p50_ns'])} · p90 {human_ns(d['p90_ns'])} · p99 {human_ns(d['p99_ns'])} · "
            f"max {human_ns(d['max_ns'])}</div>{svg}</div>")


def short_name(name: str) -> str:
    """A kernel name cut to NAME_CHARS for a table cell (the full name goes in its tooltip)."""
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _position(value: float, edges: Iterable[float], pad: float, slot: float) -> float:
    """x of ``value`` on the log-spaced bin axis (interpolated inside its bin)."""
    import math

    e = list(edges)
    for i in range(len(e) - 1):
        if value <= e[i + 1] or i == len(e) - 2:
            lo, hi = math.log(max(e[i], 1e-9)), math.log(max(e[i + 1], 1e-9))
            frac = 0.0 if hi <= lo else min(1.0, max(0.0, (math.log(max(value, 1e-9)) - lo) / (hi - lo)))
            return pad + (i + frac) * slot
    return pad
