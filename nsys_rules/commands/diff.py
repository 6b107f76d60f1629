"""``nsys-rules diff BASE NEW``: time per step before and after, why it moved, the biggest movers, and a gate."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tabulate import tabulate

from nsys_rules.diff import DEFAULT_GATE_PCT, Change, DiffResult, compare, side_summary
from nsys_rules.errors import ExitCode, UsageError
from nsys_rules.formatters.layout import FILE_WIDTH, fit, one_line, shorten, terminal_width
from nsys_rules.formatters.markdown import cell, code_cell
from nsys_rules.inputs import open_trace
from nsys_rules.loaders.memory_limit import install_read_guard
from nsys_rules.textsafe import terminal_safe
from nsys_rules.units import human_ns
from nsys_rules.model.windows import SteadyOptions
from nsys_rules.commands.common import add_plugin_flags, registry_for, settings_for

FORMATS = ("table", "json", "markdown")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("diff", help="compare two traces per step: did the step get slower, and why",
                       description="Compare the steady steps of two traces (BASE, then NEW): the time per step on the "
                                   "loop's GPU, explained by GPU kernel time and idle time (gaps) per step, the step "
                                   "budget's parts, kernel classes and the biggest movers. Exit 1 when the time per "
                                   "step grew by more than --gate percent; exit 2 when either trace has no steps to "
                                   "compare.")
    p.add_argument("base", metavar="BASE", help="the reference trace (.sqlite export or parquetdir/arrowdir folder)")
    p.add_argument("new", metavar="NEW", help="the trace to judge")
    p.add_argument("--format", default="table", choices=FORMATS, help="table (default), json or markdown")
    p.add_argument("--gate", type=float, default=DEFAULT_GATE_PCT, metavar="PCT",
                   help=f"fail (exit 1) when the time per step grows by more than PCT percent "
                        f"(default {DEFAULT_GATE_PCT:g})")
    p.add_argument("--top", type=int, default=10, metavar="N", help="movers to list (default 10)")
    p.add_argument("--config", metavar="FILE", help="config file (steady-ranges is used)")
    add_plugin_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not math.isfinite(args.gate) or args.gate < 0:
        raise UsageError(f"--gate must be a percentage >= 0, not {args.gate!r}")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    registry = registry_for(args)
    settings = settings_for(args, registry)
    steady = SteadyOptions(tuple(settings.steady_ranges))
    sides = []
    for path in (args.base, args.new):
        trace = open_trace(Path(path), registry.loaders, max_memory=settings.max_memory)
        try:
            install_read_guard(trace, settings.max_memory)
            sides.append(side_summary(trace, steady))
        finally:
            trace.close()
    result = compare(sides[0], sides[1], args.gate)
    if args.format == "json":
        text = json.dumps(result.to_json(args.top), indent=2) + "\n"
    elif args.format == "markdown":
        text = render_markdown(result, args.top)
    else:
        text = render_table(result, args.top, terminal_width() or FILE_WIDTH)
    if args.format != "json":
        text = terminal_safe(text)  # names from the files must not drive the terminal (json escapes itself)
    sys.stdout.write(text)
    sys.stdout.flush()
    return int(ExitCode.FINDINGS if result.regressed else ExitCode.OK)


def _pct(value: float | None) -> str:
    return "new" if value is None else f"{value:+.1f} %"


def _gate_line(result: DiffResult) -> str:
    status = "FAIL" if result.regressed else "pass"
    return (f"gate: {status}: time per step {_pct(result.step_change_pct)} "
            f"({human_ns(result.base['step_time_ns'])} -> {human_ns(result.new['step_time_ns'])}), gate {result.gate_pct:g} %")


#: The per-step totals: the step (what the gate judges), then what explains it.
TOTALS = (("step_time_ns", "time per step"), ("busy_per_step_ns", "GPU kernel time"),
          ("idle_per_step_ns", "GPU idle (gaps)"), ("contention_per_step_ns", "other work on the GPU"),
          ("gpu_time_per_step_ns", "kernel time, all streams"))


def _totals(result: DiffResult) -> list[list[str]]:
    rows = []
    for key, label in TOTALS:
        b, n = result.base[key], result.new[key]
        if key == "contention_per_step_ns" and not (b or n):
            continue
        rows.append([label, human_ns(b), human_ns(n), human_ns(n - b, signed=True), _pct(100.0 * (n - b) / b if b else None)])
    rows.append(["steps", str(result.base["steps"]), str(result.new["steps"]),
                 f"{result.new['steps'] - result.base['steps']:+d}", ""])
    return rows


def _change(c: Change) -> list[str]:
    """BASE, NEW, delta and change cells of one part, class or kernel."""
    return [human_ns(c.base_ns), human_ns(c.new_ns), human_ns(c.delta_ns, signed=True), _pct(c.pct)]


def _md_row(cells: list[str]) -> str:
    return f"| {' | '.join(cells)} |"


def _side(label: str, side: dict[str, object]) -> str:
    return f"{label} {one_line(side['path'])}: {one_line(side['window'])}"


def render_table(result: DiffResult, top: int = 10, width: int = FILE_WIDTH) -> str:
    """Plain-text report, ``width`` columns wide (kernel names are cut to fit)."""
    name_w = max(20, min(70, width - 62))
    out = fit([_side("BASE", result.base), _side("NEW ", result.new)], width) + [""]
    out.append(tabulate(_totals(result), headers=["per step", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += ["", "the step by part (mean per step):"]
    out.append(tabulate([[shorten(c.kernel_class, name_w), *_change(c)] for c in result.parts if c.base_ns or c.new_ns],
                        headers=["part", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += ["", "GPU time by kernel class:"]
    out.append(tabulate([[one_line(c.name), *_change(c)] for c in result.classes],
                        headers=["class", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += ["", f"biggest movers (top {top}):"]
    out.append(tabulate([[shorten(one_line(c.name), name_w), one_line(c.kernel_class), *_change(c)]
                         for c in result.movers[:top]],
                        headers=["kernel", "class", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += [""] + fit([f"verdict: {result.verdict['text']}", _gate_line(result)]
                      + [f"note: {one_line(note)}" for note in result.notes], width)
    return "\n".join(out) + "\n"


def render_markdown(result: DiffResult, top: int = 10) -> str:
    """PR-comment Markdown."""
    icon = "❌" if result.regressed else "✅"
    b, n = result.base, result.new
    out = [f"## nsys-rules diff {icon} time per step {_pct(result.step_change_pct)} (gate {result.gate_pct:g} %)",
           "", f"**Verdict:** {cell(result.verdict['text'], 1000)}", "",
           f"BASE {code_cell(b['path'], 300)} ({b['steps']} steps) → NEW {code_cell(n['path'], 300)} ({n['steps']} steps)",
           "", "| per step | BASE | NEW | delta | change |", "|---|---:|---:|---:|---:|"]
    out += [_md_row(r) for r in _totals(result)]
    out += ["", "| part of the step | BASE | NEW | delta | change |", "|---|---:|---:|---:|---:|"]
    out += [_md_row([cell(c.kernel_class), *_change(c)]) for c in result.parts if c.base_ns or c.new_ns]
    out += ["", "| kernel class | BASE | NEW | delta | change |", "|---|---:|---:|---:|---:|"]
    out += [_md_row([cell(c.name), *_change(c)]) for c in result.classes]
    out += ["", "**Biggest movers**", "", "| kernel | class | BASE | NEW | delta | change |",
            "|---|---|---:|---:|---:|---:|"]
    out += [_md_row([code_cell(c.name, 70), cell(c.kernel_class), *_change(c)]) for c in result.movers[:top]]
    out += [""] + [f"> note: {cell(note, 1000)}" for note in result.notes]
    return "\n".join(out).rstrip() + "\n"
