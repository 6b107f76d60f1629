"""The text around the findings that the table and compact layouts share: each trace's header with its
step budget, and after the findings the minor ones, skipped rules, errors, the cross-trace and job
summaries and the counts. Only selects and words what the report holds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tabulate import tabulate

from nsys_rules.report import Report
from nsys_rules.textsafe import terminal_safe
from nsys_rules.units import human_ns
from nsys_rules.formatters.layout import (NO_CUDA, Answer, budget_lines, debug_build_line, gpu_names, one_line, shorten,
                                          skipped_lines, validity_line)
from nsys_rules.formatters.measured import measured_lines


def header_lines(report: Report, width: int) -> list[str]:
    """Per trace: what it is, its steady state, and its step budget (before any finding)."""
    lines: list[str] = []
    for i, result in enumerate(report.results):
        info = result.info
        if i:
            lines.append("")
        # Exports before nsys 2022.1 name no version: say so, with what the export's shapes suggest.
        version = info.nsys_version or "unknown" + (
            f", inferred {info.nsys_version_inferred}" if info.nsys_version_inferred else "")
        lines.append(f"{one_line(info.path)}  (nsys {one_line(version)}, {gpu_names(info)})")
        # What the loader dropped or patched: the numbers below cover less than the file.
        lines.extend(f"damaged export: {one_line(note)}" for note in info.damage)
        debug = debug_build_line(info)
        if debug:
            lines.append(one_line(debug))
        trust = validity_line(info)
        if trust:
            lines.append(one_line(trust))
        if not result.has_cuda:
            lines.append(NO_CUDA)
            continue
        user = info.window.get("filter", {}).get("source")
        if user:
            lines.append(f"window: {one_line(user)} (every finding judges this window)")
        steady = info.window.get("steady", {}).get("source")
        if steady:
            lines.append(f"steady state: {one_line(steady)}")
        lines += budget_lines(info, label_width=min(40, max(24, width - 38)))
        lines += measured_lines(info, label_width=min(40, max(24, width - 38)), width=width)
    return lines


def tail_lines(report: Report, ranked: Answer, width: int) -> list[str]:
    """After the findings: the minor ones, skipped rules, errors, the cross-trace and job summaries, the counts."""
    lines: list[str] = []
    minor = ranked.minor_line()
    if minor:
        lines.append(minor)
    lines += skipped_lines(report, report.verbose)
    for e in report.all_errors:
        lines.append(one_line(f"error: {e.rule or e.plugin}: {e.error}"))
    lines += [one_line(f"capped: {c.line()}") for c in report.all_capped]
    if report.cross_trace:
        lines.extend(cross_trace_lines(report.cross_trace, width))
    if report.job is not None:
        lines.extend(job_summary_lines(report.job.info))
    elif report.verbose and report.job_note:
        lines.append(one_line(f"job: not judged as one job: {report.job_note}"))
    lines.append(ranked.counts_line())
    return lines


def cross_trace_lines(summary: dict[str, Any], width: int) -> list[str]:
    """The cross-trace summary; its kernel table as one short block per kernel when the table is too wide."""
    lines = cross_trace_summary_lines(summary)
    if all(len(line) <= width for text in lines for line in text.split("\n")):
        return lines
    out = lines[:1] + ["kernels shared by the traces, by the slowest trace's excess over the median:"]
    for k in summary["kernels"]:
        ratio = f" ({k['max_over_median']:.2f}x)" if k.get("max_over_median") else ""
        out.append(f"  {shorten(one_line(k['kernel']), max(20, width - 4))}")
        out.append(f"    median {human_ns(k['median_ns'])}, max {human_ns(k['max_ns'])}{ratio}, excess "
                   f"{human_ns(k['excess_ns'])} in {one_line(os.path.basename(str(k['slowest'])))}")
    return out


def cross_trace_summary_lines(summary: dict[str, Any]) -> list[str]:
    """The cross-trace summary as text lines for the table output."""
    slow = summary["slowest"]
    ratio = slow.get("ratio_to_median")
    lines = [f"across {len(summary['traces'])} traces: slowest {terminal_safe(slow['path'], newlines=False)} with "
             f"{human_ns(slow['kernel_ns'])} of kernel time"
             + (f", {ratio:.2f}x the median ({human_ns(slow['median_kernel_ns'])})" if ratio else "")]
    rows = [[_short(k["kernel"]), human_ns(k["median_ns"]), human_ns(k["max_ns"]),
             f"{k['max_over_median']:.2f}" if k["max_over_median"] else "", human_ns(k["excess_ns"]),
             terminal_safe(Path(k["slowest"]).name, newlines=False)] for k in summary["kernels"]]
    if rows:
        lines.append(tabulate(rows, headers=["kernel (shared)", "median", "max", "max/median", "excess", "slowest trace"],
                              tablefmt="simple"))
    return lines


def _short(name: str, width: int = 60) -> str:
    name = terminal_safe(name, newlines=False)
    return name if len(name) <= width else name[: width - 3] + "..."


def job_summary_lines(info: dict[str, Any]) -> list[str]:
    """The job section as text lines for the table output."""
    ranks = info.get("ranks", [])
    if not ranks:
        return []
    clock = info["clock"]
    comm = info["communication"]
    names = ", ".join(f"{k['name']} ({k['family']}, {k['instances']})" for k in comm["kernels"][:4]) or "none found"
    correction = f", corrected by up to {human_ns(clock['max_correction_ns'])}" if clock["max_correction_ns"] else ""
    return [f"job: {len(ranks)} ranks; clocks: {clock['source']}{correction}, residual skew "
            f"{human_ns(clock['residual_skew_ns'])}; {comm['collectives']} collectives "
            f"({comm['collectives_all_ranks_meet']} where all ranks meet), {info['steps']['count']} steps; "
            f"communication kernels: {names}"]
