"""Markdown for pull-request comments and GitHub job summaries.

A headline with the counts; per trace its steady state and step budget (the median step's time
by part, see :mod:`.layout`); the findings ranked (errors, then warnings by savings, then infos:
the "what to optimize next" list) with the symptoms each explains, the findings under the noise
floor in one line; and a small table of where GPU time goes per step. Every number comes from
the report (findings, the engine's budget and profile); nothing is computed here.

GitHub renders the result, so every text from the trace goes through
:func:`~nsys_rules.textsafe.markdown_safe` (messages: their code spans stay code, the rest is
escaped) or :func:`~nsys_rules.textsafe.markdown_code` (a name as inline code): no kernel or
range name can become a link, an image, HTML or a mention.
"""

from __future__ import annotations

from typing import Any

from nsys_rules.findings import Finding
from nsys_rules.records import TraceInfo
from nsys_rules.report import Report, TraceResult
from nsys_rules.textsafe import markdown_code, markdown_safe
from nsys_rules.units import human_ns
from nsys_rules.formatters.measured import measured_view, pct_text
from nsys_rules.formatters.layout import (NO_CUDA, Entry, answer, budget_view, debug_build_line, draws_profile, explains_line,
                                          gpu_names, ms, savings_note, savings_share, savings_text, shorten, validity_line)

#: Findings listed in full; the rest are counted.
TOP_FINDINGS = 10
#: Kernels in the per-step table.
TOP_KERNELS = 8

_ICON = {"error": "🔴", "warning": "🟠", "info": "🔵"}


def cell(text: object, limit: int = 160) -> str:
    """One table cell of message text: cut at a word to ``limit`` characters, made safe, pipes escaped."""
    return markdown_safe(shorten(str(text), limit)).replace("|", "\\|")


def code_cell(text: object, limit: int = 160) -> str:
    """A name as inline code in a table cell: cut to ``limit`` characters, pipes escaped."""
    return markdown_code(shorten(str(text), limit)).replace("|", "\\|")


@draws_profile  # Markdown shows the kernel table
def format_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown."""
    ranked = answer(report)
    lines = [f"## nsys-rules: {ranked.counts_line()}", ""]
    for result in report.results:
        lines += _trace_block(result)
    if ranked.entries:
        lines += ["### What to optimize next", "",
                  "| # | | rule | saves | finding | next optimization |", "|---:|---|---|---:|---|---|"]
        for entry in ranked.entries[:TOP_FINDINGS]:
            lines.append(_finding_row(entry, len(report.results) > 1))
        if len(ranked.entries) > TOP_FINDINGS:
            lines.append("")
            lines.append(f"…and {len(ranked.entries) - TOP_FINDINGS} more (see `--format json`).")
        lines.append("")
    else:
        lines += ["No findings.", ""]
    minor = ranked.minor_line()
    if minor:
        lines += [cell(minor, 600), ""]
    for result in report.results:
        lines += _kernel_table(result, len(report.results) > 1)
    skipped = [x for r in report.results if r.has_cuda or report.verbose for x in r.skipped]
    skipped += report.job.skipped if report.job is not None else []
    if skipped and not report.verbose:
        names = ", ".join(code_cell(name) for name in dict.fromkeys(x.rule for x in skipped))
        lines += [f"{len(skipped)} rule run(s) had nothing to judge ({names}); `check -v` lists why.", ""]
    elif skipped:
        lines += [f"<details><summary>{len(skipped)} rule(s) skipped</summary>", ""]
        lines += [f"- {code_cell(x.rule)}: {cell(x.reason, 300)}" + (f" (fix: {cell(x.fix, 300)})" if x.fix else "")
                  for x in skipped]
        lines += ["", "</details>", ""]
    if report.job is None and report.verbose and report.job_note:
        lines += [f"job: not judged as one job: {cell(report.job_note, 600)}", ""]
    for e in report.all_errors:
        lines.append(f"> **error** in {code_cell(e.rule or e.plugin)}: {cell(e.error, 300)}")
    lines += [f"> **capped**: {cell(c.line(), 600)}" for c in report.all_capped]
    return "\n".join(lines).rstrip() + "\n"



def _trace_block(result: TraceResult) -> list[str]:
    info = result.info
    head = f"**{code_cell(info.path, 300)}** · nsys {cell(info.nsys_version or '?')} · {cell(gpu_names(info))}"
    out = [head, ""]
    # What the loader dropped or patched: the numbers cover less than the file.
    out.extend(f"⚠ damaged export: {cell(note)}" for note in info.damage)
    debug = debug_build_line(info)
    if debug:
        out += [f"⚠ {cell(debug, 600)}", ""]
    trust = validity_line(info)
    if trust:
        out += [f"⚠ {cell(trust, 600)}", ""]
    if not result.has_cuda:
        return out + [cell(NO_CUDA, 400), ""]
    steady = info.window.get("steady", {}).get("source")
    if steady:
        out += [f"steady state: {cell(steady)}", ""]
    return out + _budget_table(info)


def _budget_table(info: TraceInfo) -> list[str]:
    """The step budget: the headline, then the median step's parts (the launch wait split in two)."""
    view = budget_view(info)
    if view is None:
        reason = info.budget_reason
        return [f"step budget: none ({cell(reason, 300)})", ""] if reason else []
    out = [f"**Step time** {view.headline()}", "",
           "| the median step by part | median step | share | mean/step |", "|---|---:|---:|---:|"]
    for row in view.rows:
        label = ("↳ " if row.depth else "") + cell(row.label, 80)
        out.append(f"| {label} | {ms(row.median_ns)} | {100 * row.share:.1f} % | {ms(row.mean_ns)} |")
    return out + [""] + _measured_table(info)


def _measured_table(info: TraceInfo) -> list[str]:
    """What the GPU metrics measured while each part ran (only for traces that hold them)."""
    view = measured_view(info)
    if view is None:
        return []
    if view.reason is not None:
        return [f"GPU metrics: not measured ({cell(view.reason, 300)})", ""]
    out = [cell(view.headline, 300), "", "| part | " + " | ".join(h for _, h in view.columns) + " | bound |",
           "|---|" + "---:|" * len(view.columns) + "---|"]
    for row in view.rows:
        out.append(f"| {cell(row.label, 80)} | " + " | ".join(pct_text(row.levels.get(k)) for k, _ in view.columns)
                   + f" | {cell(row.words or row.bound, 200)} |")
    return out + [""]


def _finding_row(entry: Entry, many: bool) -> str:
    f = entry.finding
    where = _where(f)
    text = cell(f.message, 400) + (f" — {code_cell(where, 80)}" if where else "")
    if many and f.location.trace:
        text += f" ({cell(f.location.trace.rsplit('/', 1)[-1])})"
    note = savings_note(f)
    if note:
        text += f"<br>savings: {cell(note, 200)}"
    text += "".join(f"<br>{cell(explains_line(s, 120), 160)}" for s in entry.explains)
    saves = savings_text(f)
    share = savings_share(entry)
    saves = (saves + (f"<br>{share}" if share else "")) if saves else "–"
    return (f"| {entry.number} | {_ICON.get(f.severity.value, '')} {f.severity.value} | {code_cell(f.rule)} | "
            f"{saves} | {text} | {cell(f.recommendation, 300)} |")


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
    title = "### GPU time per step" + (f" — {code_cell(result.info.path.rsplit('/', 1)[-1])}" if many else "")
    out = [title, ""]
    classes = " · ".join(f"{cell(c['class'])} {100.0 * c['share']:.0f} %" for c in p["classes"] if c["share"] >= 0.005)
    if classes:
        out += [f"by class: {classes}", ""]
    out += ["| kernel | class | per step | share | calls | median |", "|---|---|---:|---:|---:|---:|"]
    for k in p["kernels"][:TOP_KERNELS]:
        out.append(f"| {code_cell(k['name'], 70)} | {cell(k['class'])} | {human_ns(k['per_step_ns'])} | "
                   f"{100.0 * k['share']:.1f} % | {k['count']} | {human_ns(k['median_ns'])} |")
    return out + [""]
