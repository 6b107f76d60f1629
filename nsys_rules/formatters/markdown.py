"""Markdown for pull-request comments and GitHub job summaries.

A headline with the counts, per trace one line on the steady state (step time, GPU busy and
idle), the findings ranked by estimated savings (the "what to optimize next" list), and a
small table of where GPU time goes per step. Every number comes from the report (findings
and the engine's profile); nothing is computed here.

GitHub renders the result, so every text from the trace goes through
:func:`~nsys_rules.textsafe.markdown_safe` (messages: their code spans stay code, the rest is
escaped) or :func:`~nsys_rules.textsafe.markdown_code` (a name as inline code): no kernel or
range name can become a link, an image, HTML or a mention.
"""

from __future__ import annotations

from typing import Any

from ..engine import Report, TraceResult
from ..findings import Finding
from ..textsafe import markdown_code, markdown_safe
from .table import human_ns

#: Findings listed in full; the rest are counted.
TOP_FINDINGS = 10
#: Kernels in the per-step table.
TOP_KERNELS = 8

_ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def cell(text: object, limit: int = 160) -> str:
    """One table cell of message text: cut to ``limit`` characters, made safe, pipes escaped."""
    value = " ".join(str(text).split())
    value = value if len(value) <= limit else value[: limit - 1] + "…"
    return markdown_safe(value).replace("|", "\\|")


def code_cell(text: object, limit: int = 160) -> str:
    """A name as inline code in a table cell: cut to ``limit`` characters, pipes escaped."""
    value = " ".join(str(text).split())
    value = value if len(value) <= limit else value[: limit - 1] + "…"
    return markdown_code(value).replace("|", "\\|")


def format_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    s = report.summary()["by_severity"]
    lines = [f"## nsys-rules: {s['error']} error(s), {s['warning']} warning(s), {s['info']} info", ""]
    for result in report.results:
        lines += _trace_block(result)
    findings = report.findings
    if findings:
        lines += ["### What to optimize next", "",
                  "| # | | rule | saves | finding | next optimization |", "|---:|---|---|---:|---|---|"]
        for i, f in enumerate(findings[:TOP_FINDINGS], 1):
            lines.append(_finding_row(i, f, len(report.results) > 1))
        if len(findings) > TOP_FINDINGS:
            lines.append("")
            lines.append(f"…and {len(findings) - TOP_FINDINGS} more (see `--format json`).")
        lines.append("")
    else:
        lines += ["No findings.", ""]
    for result in report.results:
        lines += _kernel_table(result, len(report.results) > 1)
    skipped = report.all_skipped
    if skipped:
        lines += [f"<details><summary>{len(skipped)} rule(s) skipped</summary>", ""]
        lines += [f"- {code_cell(x['rule'])}: {cell(x['reason'], 300)}"
                  + (f" (fix: {cell(x['fix'], 300)})" if x.get("fix") else "") for x in skipped]
        lines += ["", "</details>", ""]
    for e in report.all_errors:
        lines.append(f"> **error** in {code_cell(e.get('rule') or e.get('plugin'))}: {cell(e['error'], 300)}")
    return "\n".join(lines).rstrip() + "\n"


# Markdown shows the kernel table: ask the engine for the steady-state profile.
format_markdown.needs_profile = True  # type: ignore[attr-defined]


def _trace_block(result: TraceResult) -> list[str]:
    info = result.info
    gpus = ", ".join(g["name"] for g in info.get("gpus", [])) or "GPU unknown"
    head = f"**{code_cell(info['path'], 300)}** · nsys {cell(info.get('nsys_version') or '?')} · {cell(gpus)}"
    out = [head]
    p = result.profile
    if p:
        steps = f"{p['steps']} × {code_cell(p['step_range'], 80)}" if p.get("steps") else "no step range"
        step = p["step_time_ns"]
        busy = p["busy_per_step_ns"]
        share = f" ({100.0 * busy / step:.0f} %)" if step else ""
        out.append(f"steady state: {cell(p['window'])} ({steps}) · per step: wall {human_ns(step)}, "
                   f"GPU busy {human_ns(busy)}{share}, idle {human_ns(p['idle_per_step_ns'])}")
    else:
        steady = info.get("window", {}).get("steady", {}).get("source")
        if steady:
            out.append(f"steady state: {cell(steady)}")
    # What the loader dropped or patched: the numbers cover less than the file.
    out.extend(f"⚠ damaged export: {cell(note)}" for note in info.get("damage", []))
    return out + [""]


def _finding_row(i: int, f: Finding, many: bool) -> str:
    where = _where(f)
    text = cell(f.message, 400) + (f" — {code_cell(where, 80)}" if where else "")
    if many and f.location.trace:
        text += f" ({cell(f.location.trace.rsplit('/', 1)[-1])})"
    return (f"| {i} | {_ICON.get(f.severity.value, '')} {f.severity.value} | {code_cell(f.rule)} | "
            f"{human_ns(f.estimated_savings_ns) or '–'} | {text} | {cell(f.recommendation, 300)} |")


def _where(f: Finding) -> str:
    loc = f.location
    if loc.kernel:
        return loc.kernel
    if loc.api:
        return loc.api
    if loc.nvtx:
        return "/".join(loc.nvtx)
    return ""


def _kernel_table(result: TraceResult, many: bool) -> list[str]:
    p: dict[str, Any] | None = result.profile
    if not p or not p.get("kernels"):
        return []
    title = "### GPU time per step" + (f" — {code_cell(result.info['path'].rsplit('/', 1)[-1])}" if many else "")
    out = [title, ""]
    classes = " · ".join(f"{cell(c['class'])} {100.0 * c['share']:.0f} %" for c in p["classes"] if c["share"] >= 0.005)
    if classes:
        out += [f"by class: {classes}", ""]
    out += ["| kernel | class | per step | share | calls | median |", "|---|---|---:|---:|---:|---:|"]
    for k in p["kernels"][:TOP_KERNELS]:
        out.append(f"| {code_cell(k['name'], 70)} | {cell(k['class'])} | {human_ns(k['per_step_ns'])} | "
                   f"{100.0 * k['share']:.1f} % | {k['count']} | {human_ns(k['median_ns'])} |")
    return out + [""]
