"""A single self-contained HTML report: inline CSS and SVG, no script, no network.

Per trace: headline cards (step time, GPU busy share, GPU time per step, findings), the
ranked findings with their evidence, GPU time by kernel class and by kernel, the
steady-state timeline (busy vs idle per step) and the duration distributions of the
kernels that findings point at. Every number comes from the report: the findings and the
engine's steady-state profile (:mod:`nsys_rules.overview`); this module only draws.
"""

from __future__ import annotations

from typing import Any, Iterable

from .. import __version__
from ..records import TraceInfo
from ..report import Report, TraceResult
from ..findings import Finding, Metric, rank_key
from .layout import (NO_CUDA, Entry, answer, budget_view, explains_line, gpu_names, ms, savings_note, savings_share,
                     savings_text)
from .sections import job_summary_lines
from ..textsafe import NAME_CHARS as LONG_NAME
from ..textsafe import clip, html_safe
from ..units import human_ns

#: Colour of each kernel class (taxonomy classes plus copy-engine work).
CLASS_COLORS = {
    "gemv": "#4f7cff", "gemm": "#8b5cf6", "attention": "#ec4899", "norm": "#f59e0b", "elementwise": "#10b981",
    "reduce": "#06b6d4", "memory": "#84cc16", "communication": "#f97316", "memcpy": "#64748b", "memset": "#94a3b8",
    "cuda-graph": "#a855f7", "other": "#cbd5e1",
}
#: Kernels in the table; names are cut to NAME_CHARS (the full name is the cell's tooltip).
TOP_KERNELS = 12
NAME_CHARS = 96
SEVERITY_COLORS = {"error": "#dc2626", "warning": "#f59e0b", "info": "#3b82f6"}

CSS = """
:root{--bg:#f6f7fb;--card:#fff;--ink:#0f172a;--mute:#64748b;--line:#e2e8f0;--busy:#4f7cff;--idle:#fca5a5}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--ink);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header{background:linear-gradient(120deg,#0f172a,#1e3a8a);color:#fff;padding:22px 32px}
header h1{margin:0;font-size:22px;font-weight:650;letter-spacing:.2px}header p{margin:4px 0 0;color:#cbd5e1}
main{max-width:1180px;margin:0 auto;padding:20px 24px 48px}
section{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:18px 20px;margin:16px 0;
box-shadow:0 1px 2px rgba(15,23,42,.04)}
h2{font-size:17px;margin:0 0 12px}h3{font-size:14px;margin:14px 0 6px;color:#334155}
.trace{font-size:19px;margin:26px 0 4px;word-break:break-all}.sub{color:var(--mute);margin:0 0 8px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(170px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:14px 16px}
.card .k{color:var(--mute);font-size:12px;text-transform:uppercase;letter-spacing:.5px}
.card .v{font-size:24px;font-weight:650;margin-top:2px}.card .s{color:var(--mute);font-size:12px}
.finding{border:1px solid var(--line);border-left:5px solid var(--sev);border-radius:10px;padding:12px 14px;margin:10px 0}
.finding .top{display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.badge{background:var(--sev);color:#fff;border-radius:999px;padding:1px 9px;font-size:12px;font-weight:600}
.rule{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;background:#f1f5f9;border-radius:6px;padding:1px 6px}
.save{margin-left:auto;font-weight:650}.title{font-weight:600}
.msg{margin:8px 0 4px}.next{background:#f0fdf4;border:1px solid #bbf7d0;border-radius:8px;padding:8px 10px;margin-top:8px}
.next b{color:#15803d}.where{color:var(--mute);font-size:12px;word-break:break-all;margin-top:4px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);
vertical-align:top}th{color:var(--mute);font-weight:600;font-size:12px}td.n,th.n{text-align:right;white-space:nowrap}td.c{white-space:nowrap}
.ev td{font-size:12.5px;padding:3px 8px}.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;
word-break:break-all}.bar{height:10px;border-radius:5px;background:#e2e8f0;min-width:120px}
.bar span{display:block;height:10px;border-radius:5px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:10px 0 2px;font-size:12.5px}
.legend i{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:6px;vertical-align:-1px}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:#475569}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:14px}
.dist{border:1px solid var(--line);border-radius:10px;padding:10px 12px}.empty{color:var(--mute)}
details summary{cursor:pointer;color:#334155}footer{color:var(--mute);text-align:center;font-size:12px;margin-top:26px}
"""


def format_html(report: Report) -> str:
    """The report as one HTML document."""
    s = report.summary()["by_severity"]
    names = ", ".join(r.info.path.rsplit("/", 1)[-1] for r in report.results) or "no trace"
    body = [f"<header><h1>nsys-rules report</h1><p>{html_safe(names)} · {s['error']} error(s), {s['warning']} warning(s), "
            f"{s['info']} info</p></header><main>"]
    for result in report.results:
        body.append(_trace_section(result, report, len(report.results) > 1))
    if not report.results:
        body.append("<section><p class='empty'>No trace was analysed.</p></section>")
    if getattr(report, "job", None) is not None and report.job.info.get("ranks"):
        body.append(_job_section(report))
    plugin_errors = list(report.errors)
    if plugin_errors:
        body.append("<section><h2>Plugin errors</h2><ul>" + "".join(
            f"<li>{html_safe(str(e.plugin or '?'))}: {html_safe(e.error)}</li>" for e in plugin_errors)
            + "</ul></section>")
    body.append(f"<footer>nsys-rules {html_safe(__version__)} · self-contained report: no scripts, no network</footer></main>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>nsys-rules: {html_safe(names)}</title><style>{CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")


# The HTML draws the profile: ask the engine for it.
format_html.needs_profile = True  # type: ignore[attr-defined]


def _trace_section(result: TraceResult, report: Report, many: bool) -> str:
    info, p = result.info, result.profile
    out = [f"<h2 class='trace'>{html_safe(info.path)}</h2>",
           f"<p class='sub'>nsys {html_safe(str(info.nsys_version or '?'))} · {html_safe(gpu_names(info))}"
           + (f" · steady state: {html_safe(p['window'])}" if p else "") + "</p>"]
    # What the loader dropped or patched: the numbers cover less than the file.
    out += [f"<p class='sub'>⚠ damaged export: {html_safe(note)}</p>" for note in info.damage]
    if not result.has_cuda:
        return "".join(out) + f"<section><p class='empty'>{html_safe(NO_CUDA)}</p></section>"
    out.append(_budget_section(info))
    ranked = answer(report).only(result.findings)
    findings = [e.finding for e in ranked.entries]
    out.append(_cards(result, p, findings))
    out.append("<section><h2>What to optimize next</h2>")
    if ranked.entries:
        top = max((f.estimated_savings_ns or 0) for f in findings) or 1
        out += [_finding(e.number, e.finding, top, e) for e in ranked.entries]
    else:
        out.append("<p class='empty'>No findings: nothing the rules flag in this trace.</p>")
    if ranked.minor_line():
        out.append(f"<p class='sub'>{html_safe(ranked.minor_line() or '')}</p>")
    if result.skipped and not report.verbose:
        names = ", ".join(dict.fromkeys(x.rule for x in result.skipped))
        out.append(f"<p class='sub'>{len(result.skipped)} rule(s) had nothing to judge ({html_safe(names)}); "
                   "<code>check -v</code> lists why.</p>")
    elif result.skipped:
        out.append(f"<details><summary>{len(result.skipped)} rule(s) skipped</summary><ul>" + "".join(
            f"<li><span class='rule'>{html_safe(x.rule)}</span> {html_safe(x.reason)}"
            + (f" — fix: {html_safe(x.fix)}" if x.fix else "") + "</li>" for x in result.skipped)
            + "</ul></details>")
    if result.errors:
        out.append("<h3>Errors</h3><ul>" + "".join(
            f"<li><span class='rule'>{html_safe(str(e.rule))}</span> {html_safe(e.error)}</li>" for e in result.errors)
            + "</ul>")
    out.append("</section>")
    if p:
        out.append(_classes_section(p))
        out.append(_timeline_section(p))
        out.append(_distributions_section(p))
    return "".join(out)


def _cards(result: TraceResult, p: dict[str, Any] | None, findings: list[Finding]) -> str:
    cards = []
    if p:
        steps = f"{p['steps']} × {p['step_range']}" if p.get("steps") else "whole steady window"
        cards.append(_card("Step time", human_ns(p["step_time_ns"]), steps))
        cards.append(_card("GPU busy", f"{100.0 * p['busy_share']:.0f} %",
                           f"busy {human_ns(p['busy_per_step_ns'])}, idle {human_ns(p['idle_per_step_ns'])} per step"))
        cards.append(_card("GPU time / step", human_ns(p["gpu_time_per_step_ns"]),
                           f"{p['classes'][0]['class']} leads ({100.0 * p['classes'][0]['share']:.0f} %)"
                           if p["classes"] else "no GPU work"))
    counts = {s: sum(1 for f in findings if f.severity.value == s) for s in ("error", "warning", "info")}
    cards.append(_card("Findings", str(len(findings)),
                       f"{counts['error']} error · {counts['warning']} warning · {counts['info']} info"))
    best = findings[0] if findings else None
    if best is not None and best.estimated_savings_ns:
        cards.append(_card("Top saving", human_ns(best.estimated_savings_ns), best.rule))
    return "<div class='cards'>" + "".join(cards) + "</div>"


#: Colours of the budget's idle parts (busy parts take their kernel class's colour).
IDLE_COLORS = {"launch_wait": "#ef4444", "after_sync": "#f97316", "allocation": "#eab308", "module_loading": "#a16207",
               "graph_internal": "#fda4af", "idle_other": "#fca5a5", "contention": "#94a3b8",
               "graph_replay": CLASS_COLORS["cuda-graph"], "copy": CLASS_COLORS["memcpy"]}


def _budget_section(info: TraceInfo) -> str:
    """The step budget first: the median step drawn as one bar of its parts, then the parts as a table."""
    view = budget_view(info)
    if view is None:
        reason = info.budget_reason
        return (f"<section><h2>Step budget</h2><p class='empty'>No step budget: {html_safe(str(reason))}</p></section>"
                if reason else "")
    width, height, x = 1080, 30, 0.0
    rects, rows = [], []
    for row in view.rows:
        color = IDLE_COLORS.get(row.name) or CLASS_COLORS.get(row.name, "#cbd5e1")
        if not row.depth:
            w = width * row.share
            rects.append(f"<rect x='{x:.2f}' y='0' width='{max(w, 0.5):.2f}' height='{height}' fill='{color}'>"
                         f"<title>{html_safe(row.label)}: {ms(row.median_ns)} ({100 * row.share:.1f} %)</title></rect>")
            x += w
        swatch = "" if row.depth else (f"<i style='display:inline-block;width:9px;height:9px;border-radius:2px;"
                                        f"background:{color};margin-right:6px'></i>")
        label = ("&nbsp;&nbsp;↳ " if row.depth else "") + html_safe(row.label)
        rows.append(f"<tr><td>{swatch}{label}</td><td class='n'>{ms(row.median_ns)}</td>"
                    f"<td class='n'>{100 * row.share:.1f} %</td><td class='n'>{ms(row.mean_ns)}</td></tr>")
    svg = (f"<svg viewBox='0 0 {width} {height}' width='100%' role='img' aria-label='the median step by part' "
           f"style='border-radius:8px;overflow:hidden'>{''.join(rects)}</svg>")
    return (f"<section><h2>Step budget</h2><p class='sub'>{html_safe(view.headline())}; the median step "
            f"({ms(view.median_step_ns)}) by part:</p>{svg}<table><tr><th>part</th><th class='n'>median step</th>"
            f"<th class='n'>share</th><th class='n'>mean/step</th></tr>{''.join(rows)}</table></section>")


def _card(key: str, value: str, sub: str) -> str:
    return f"<div class='card'><div class='k'>{html_safe(key)}</div><div class='v'>{html_safe(value)}</div>" \
           f"<div class='s'>{html_safe(sub)}</div></div>"


def _metric_text(m: Metric) -> str:
    if m.unit == "ns":
        return human_ns(m.value)
    if m.unit == "B":
        return _bytes(float(m.value))
    if m.unit == "B/s":
        return _bytes(float(m.value)) + "/s"
    if m.unit == "ratio":
        return f"{float(m.value):.3g}"
    if m.unit == "%":
        return f"{float(m.value):.3g} %"
    return f"{m.value:,}" if isinstance(m.value, int) else f"{m.value:.4g}"


def _bytes(value: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _job_section(report: Report) -> str:
    """The job rules' findings over all ranks (the traces' own sections hold theirs)."""
    job = report.job
    findings = sorted(job.findings, key=rank_key)
    out = ["<h2 class='trace'>Job: all ranks together</h2>"]
    out += [f"<p class='sub'>{html_safe(line)}</p>" for line in job_summary_lines(job.info)]
    top = max([f.estimated_savings_ns or 0 for f in findings], default=0) or 1
    out += [_finding(i, f, top) for i, f in enumerate(findings, 1)]
    if job.skipped:
        out.append("<ul>" + "".join(f"<li><span class='rule'>{html_safe(x.rule)}</span> {html_safe(x.reason)}</li>"
                                    for x in job.skipped) + "</ul>")
    return "<section>" + "".join(out) + "</section>"


def _finding(i: int, f: Finding, top_savings: int, entry: Entry | None = None) -> str:
    color = SEVERITY_COLORS.get(f.severity.value, "#64748b")
    save = ""
    if f.estimated_savings_ns:
        width = max(2.0, 100.0 * f.estimated_savings_ns / top_savings)
        share = savings_share(entry) if entry is not None else ""
        save = (f"<span class='save'>saves ≈ {html_safe(savings_text(f))}{html_safe(f', {share}' if share else '')}</span>"
                f"<div class='bar' style='width:160px' title='estimated savings'><span style='width:{width:.1f}%;"
                f"background:{color}'></span></div>")
    loc = f.location
    # Names cut before they are laid out (a kernel name can be 64 KB); the JSON keeps them whole.
    where = [x for x in (f"kernel {clip(loc.kernel, LONG_NAME)}" if loc.kernel else "",
                         f"API {clip(loc.api, LONG_NAME)}" if loc.api else "",
                         f"NVTX {clip('/'.join(loc.nvtx), LONG_NAME)}" if loc.nvtx else "",
                         f"rank {loc.rank}" if loc.rank is not None else "",
                         f"device {loc.device}" if loc.device is not None else "",
                         f"stream {loc.stream}" if loc.stream is not None else "") if x]
    evidence = "".join(f"<tr><td>{html_safe(k.replace('_', ' '))}</td><td class='n'>{html_safe(_metric_text(m))}</td></tr>"
                       for k, m in f.metrics.items())
    return (f"<div class='finding' style='--sev:{color}'><div class='top'><b>#{i}</b>"
            f"<span class='badge'>{html_safe(f.severity.value)}</span><span class='rule'>{html_safe(f.rule)}</span>"
            f"<span class='title'>{html_safe(f.title)}</span>{save}</div>"
            f"<div class='msg'>{html_safe(f.message)}</div>"
            + (f"<div class='where'>savings: {html_safe(savings_note(f) or '')}</div>" if savings_note(f) else "")
            + "".join(f"<div class='where'>{html_safe(explains_line(s))}</div>" for s in (entry.explains if entry else ()))
            + (f"<div class='where'>{html_safe(' · '.join(where))}</div>" if where else "")
            + (f"<details><summary>evidence ({len(f.metrics)} numbers)</summary><table class='ev'>{evidence}</table>"
               "</details>" if evidence else "")
            + f"<div class='next'><b>Next:</b> {html_safe(f.recommendation)}</div></div>")


def _classes_section(p: dict[str, Any]) -> str:
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
        f"<tr><td class='mono' title='{html_safe(clip(k['name'], LONG_NAME))}'>{html_safe(_short(k['name']))}</td>"
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


def _timeline_section(p: dict[str, Any]) -> str:
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
    svg += _step_strip(p["timeline"].get("typical"))
    return (f"<section><h2>Steady-state timeline: busy vs idle per step</h2><p class='sub'>{p['steps']} steps of "
            f"{html_safe(str(p['step_range']))}, wall time on the GPU clock{note}; GPU busy "
            f"{100.0 * p['busy_share']:.0f} % of the step</p>{svg}"
            "<div class='legend'><span><i style='background:var(--busy)'></i>GPU busy</span>"
            "<span><i style='background:var(--idle)'></i>GPU idle (gaps: host, launches, syncs)</span></div></section>")


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


def _distributions_section(p: dict[str, Any]) -> str:
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


def _short(name: str) -> str:
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
