"""A single self-contained HTML report: inline CSS and SVG, no script, no network.

Per trace: headline cards (step time, GPU busy share, GPU time per step, findings), the
ranked findings with their evidence, GPU time by kernel class and by kernel, the
steady-state timeline (busy vs idle per step) and the duration distributions of the
kernels that findings point at. Every number comes from the report: the findings and the
engine's steady-state profile (:mod:`nsys_rules.model.overview`); this module only draws.
"""

from __future__ import annotations

from typing import Any

from nsys_rules import __version__
from nsys_rules.findings import Finding, Metric, rank_key
from nsys_rules.records import TraceInfo
from nsys_rules.report import Report, TraceResult
from nsys_rules.textsafe import NAME_CHARS as LONG_NAME
from nsys_rules.textsafe import clip, html_safe
from nsys_rules.formatters.wrapping import CODE
from nsys_rules.units import human_ns, plain_number
from nsys_rules.formatters.measured import measured_view, pct_text
from nsys_rules.formatters.html_charts import CLASS_COLORS, classes_section, distributions_section, timeline_section
from nsys_rules.formatters.layout import (NO_CUDA, Answer, Entry, answer, budget_view, debug_build_line, draws_profile,
                                          explains_line, gpu_names, ms, savings_note, savings_share, savings_text,
                                          validity_line)
from nsys_rules.formatters.html_replay import replay_section
from nsys_rules.formatters.sections import job_summary_lines

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
.next b{color:#15803d}code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px;
background:#f1f5f9;border-radius:4px;padding:0 3px;overflow-wrap:anywhere}
.where{color:var(--mute);font-size:12px;word-break:break-all;margin-top:4px}
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


@draws_profile
def format_html(report: Report) -> str:
    """The report as one HTML document."""
    names = ", ".join(r.info.path.rsplit("/", 1)[-1] for r in report.results) or "no trace"
    body = [f"<header><h1>nsys-rules report</h1><p>{html_safe(names)} · {html_safe(answer(report).counts_line())}"
            "</p></header><main>"]
    for result in report.results:
        body.append(_trace_section(result, report, len(report.results) > 1))
    if not report.results:
        body.append("<section><p class='empty'>No trace was analysed.</p></section>")
    if getattr(report, "job", None) is not None and report.job.info.get("ranks"):
        body.append(_job_section(report))
    capped = report.all_capped
    if capped:
        body.append("<section><h2>Findings cut at --max-findings</h2><ul>" + "".join(
            f"<li>{html_safe(c.line())}</li>" for c in capped) + "</ul></section>")
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



def _trace_section(result: TraceResult, report: Report, many: bool) -> str:
    info, p = result.info, result.profile
    out = [f"<h2 class='trace'>{html_safe(info.path)}</h2>",
           f"<p class='sub'>nsys {html_safe(str(info.nsys_version or '?'))} · {html_safe(gpu_names(info))}"
           + (f" · steady state: {html_safe(p['window'])}" if p else "") + "</p>"]
    # What the loader dropped or patched: the numbers cover less than the file.
    out += [f"<p class='sub'>⚠ damaged export: {html_safe(note)}</p>" for note in info.damage]
    debug = debug_build_line(info)
    if debug:
        out.append(f"<p class='sub'>⚠ {html_safe(debug)}</p>")
    trust = validity_line(info)
    if trust:
        out.append(f"<p class='sub'>⚠ {html_safe(trust)}</p>")
    if not result.has_cuda:
        return "".join(out) + f"<section><p class='empty'>{html_safe(NO_CUDA)}</p></section>"
    out.append(_budget_section(info))
    if p and p.get("replay_timeline"):
        out.append(replay_section(p["replay_timeline"]))
    ranked = answer(report).only(result.findings)
    findings = [e.finding for e in ranked.entries]
    out.append(_cards(result, p, ranked))
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
        out.append(classes_section(p))
        out.append(timeline_section(p))
        out.append(distributions_section(p))
    return "".join(out)


def _cards(result: TraceResult, p: dict[str, Any] | None, ranked: Answer) -> str:
    cards = []
    view = budget_view(result.info)
    if view is not None:  # the typical step and its busy/idle split: the budget's numbers, as every format prints
        idle = sum(r.median_ns for r in view.rows if r.kind == "idle" and not r.depth)
        cards.append(_card("Typical step", human_ns(view.median_step_ns),
                           f"median of {view.steps} steps · p90 {human_ns(view.p90_ns)}"))
        cards.append(_card("GPU busy", f"{100.0 * (view.median_step_ns - idle) / view.median_step_ns:.0f} %",
                           f"busy {human_ns(view.median_step_ns - idle)}, idle {human_ns(idle)} in the typical step"
                           " on the loop's GPU"))
    elif p:
        steps = f"{p['steps']} × {p['step_range']}" if p.get("steps") else "whole steady window"
        cards.append(_card("Mean step", human_ns(p["step_time_ns"]), steps))
        cards.append(_card("GPU busy", f"{100.0 * p['busy_share']:.0f} %",
                           f"busy {human_ns(p['busy_per_step_ns'])}, idle {human_ns(p['idle_per_step_ns'])} per step "
                           "(mean, all GPUs)"))
    if p:
        lead = (f"; {p['classes'][0]['class']} leads ({100.0 * p['classes'][0]['share']:.0f} %)"
                if p["classes"] else "; no GPU work")
        cards.append(_card("GPU time / step", human_ns(p["gpu_time_per_step_ns"]),
                           "mean, summed over all GPUs and streams" + lead))
    # The same counts as the header and the text's last line: shown, then folded and minor.
    counts = ranked.shown_counts()
    more = "".join(f" · {n} {what}" for n, what in ((ranked.folded, "folded"), (len(ranked.minor), "minor")) if n)
    cards.append(_card("Findings", str(len(ranked.entries)),
                       f"{counts['error']} error · {counts['warning']} warning · {counts['info']} info{more}"))
    best = ranked.entries[0].finding if ranked.entries else None
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
            f"<th class='n'>share</th><th class='n'>mean/step</th></tr>{''.join(rows)}</table>"
            f"{_measured_table(info)}</section>")


def _measured_table(info: TraceInfo) -> str:
    """What the GPU metrics measured while each part ran; empty for a trace without them."""
    view = measured_view(info)
    if view is None:
        return ""
    if view.reason is not None:
        return f"<p class='sub'>GPU metrics: not measured ({html_safe(view.reason)})</p>"
    head = "".join(f"<th class='n'>{html_safe(h)}</th>" for _, h in view.columns)
    rows = "".join(
        f"<tr><td>{html_safe(row.label)}</td>" + "".join(f"<td class='n'>{pct_text(row.levels.get(k))}</td>"
                                                      for k, _ in view.columns)
        + f"<td>{html_safe(row.words or row.bound)}</td></tr>" for row in view.rows)
    return (f"<h3>Measured while each part runs</h3><p class='sub'>{html_safe(view.headline)}</p>"
            f"<table><tr><th>part</th>{head}<th>bound</th></tr>{rows}</table>")


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
        return plain_number(m.value)
    if m.unit == "%":
        return f"{plain_number(m.value)} %"
    return f"{m.value:,}" if isinstance(m.value, int) else plain_number(m.value, 4)


def _bytes(value: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{plain_number(value / scale)} {unit}"
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
            f"<div class='msg'>{with_code(f.message)}</div>"
            + (f"<div class='where'>savings: {with_code(savings_note(f) or '')}</div>" if savings_note(f) else "")
            + "".join(f"<div class='where'>{html_safe(explains_line(s))}</div>" for s in (entry.explains if entry else ()))
            + (f"<div class='where'>{html_safe(' · '.join(where))}</div>" if where else "")
            + (f"<details><summary>evidence ({len(f.metrics)} numbers)</summary><table class='ev'>{evidence}</table>"
               "</details>" if evidence else "")
            + f"<div class='next'><b>Next:</b> {with_code(f.recommendation)}</div></div>")


def with_code(text: str) -> str:
    """``text`` escaped for HTML, its Markdown code spans (`` `nsys profile ...` ``) as ``<code>``: the
    rules write commands and code in backticks, which a page shows as code, not as backticks."""
    return CODE.sub(lambda m: f"<code>{m.group(1)}</code>", html_safe(text))
