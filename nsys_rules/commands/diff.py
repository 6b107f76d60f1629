"""``nsys-rules diff BASE NEW``: per-step GPU time before and after, the biggest movers, a verdict and a gate."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tabulate import tabulate

from ..diff import DEFAULT_GATE_PCT, DiffResult, compare, side_summary
from ..errors import ExitCode, UsageError
from ..inputs import open_trace
from ..memory_limit import install_read_guard
from ..windows import SteadyOptions
from ..textsafe import markdown_code, markdown_safe, terminal_safe
from .common import add_plugin_flags, registry_for, settings_for

FORMATS = ("table", "json", "markdown")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("diff", help="compare two traces per step: what moved, and whether it regressed",
                       description="Compare the steady state of two traces (BASE, then NEW) per step: GPU time per "
                                   "kernel class and kernel, the biggest movers, whether kernel time or only the gaps "
                                   "changed. Exit 1 when total GPU time per step grew by more than --gate percent.")
    p.add_argument("base", metavar="BASE", help="the reference trace (.sqlite export or parquetdir/arrowdir folder)")
    p.add_argument("new", metavar="NEW", help="the trace to judge")
    p.add_argument("--format", default="table", choices=FORMATS, help="table (default), json or markdown")
    p.add_argument("--gate", type=float, default=DEFAULT_GATE_PCT, metavar="PCT",
                   help=f"fail (exit 1) when GPU time per step regresses by more than PCT percent (default {DEFAULT_GATE_PCT:g})")
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
        trace = open_trace(Path(path), registry.loaders)
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
        text = render_table(result, args.top)
    if args.format != "json":
        text = terminal_safe(text)  # names from the files must not drive the terminal (json escapes itself)
    sys.stdout.write(text)
    sys.stdout.flush()
    return int(ExitCode.FINDINGS if result.regressed else ExitCode.OK)


def _ns(value: float, signed: bool = False) -> str:
    sign = ("+" if value > 0 else "-" if value < 0 else "") if signed else ""
    v = abs(value)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= scale:
            return f"{sign}{v / scale:.3g} {unit}"
    return f"{sign}{v:.0f} ns"


def _pct(value: float | None) -> str:
    return "new" if value is None else f"{value:+.1f} %"


def _gate_line(result: DiffResult) -> str:
    status = "FAIL" if result.regressed else "pass"
    return (f"gate: {status}: GPU time per step {_pct(result.gpu_change_pct)} "
            f"({_ns(result.base['gpu_time_per_step_ns'])} -> {_ns(result.new['gpu_time_per_step_ns'])}), "
            f"gate {result.gate_pct:g} %")


def _totals(result: DiffResult) -> list[list[str]]:
    rows = []
    for key, label in (("step_time_ns", "step time"), ("gpu_time_per_step_ns", "GPU time / step"),
                       ("busy_per_step_ns", "GPU busy / step"), ("idle_per_step_ns", "GPU idle / step")):
        b, n = result.base[key], result.new[key]
        rows.append([label, _ns(b), _ns(n), _ns(n - b, signed=True), _pct(100.0 * (n - b) / b if b else None)])
    return rows


def _t(text: object) -> str:
    return terminal_safe(str(text), newlines=False)


def render_table(result: DiffResult, top: int = 10) -> str:
    """Plain-text report; every name from the traces shown as one visible line."""
    b, n = result.base, result.new
    out = [f"BASE {_t(b['path'])}: {_t(b['window'])} ({b['steps']} steps)",
           f"NEW  {_t(n['path'])}: {_t(n['window'])} ({n['steps']} steps)", ""]
    out.append(tabulate(_totals(result), headers=["per step", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += ["", "by kernel class:"]
    out.append(tabulate([[_t(c.name), _ns(c.base_ns), _ns(c.new_ns), _ns(c.delta_ns, True), _pct(c.pct)]
                         for c in result.classes], headers=["class", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += ["", f"biggest movers (top {top}):"]
    out.append(tabulate([[_t(c.name)[:70], _t(c.kernel_class), _ns(c.base_ns), _ns(c.new_ns), _ns(c.delta_ns, True),
                          _pct(c.pct)]
                         for c in result.movers[:top]],
                        headers=["kernel", "class", "BASE", "NEW", "delta", "change"], tablefmt="simple"))
    out += ["", f"verdict: {_t(result.verdict['text'])}", _gate_line(result)]
    out += [f"note: {_t(note)}" for note in result.notes]
    return "\n".join(out) + "\n"


def _md(text: object, code: bool = False) -> str:
    """A table cell or line of text from the traces, made safe for GitHub (pipes escaped for tables)."""
    return (markdown_code(str(text)) if code else markdown_safe(str(text))).replace("|", "\\|")


def render_markdown(result: DiffResult, top: int = 10) -> str:
    """PR-comment Markdown."""
    icon = "❌" if result.regressed else "✅"
    b, n = result.base, result.new
    out = [f"## nsys-rules diff {icon} GPU time per step {_pct(result.gpu_change_pct)} (gate {result.gate_pct:g} %)", "",
           f"**Verdict:** {_md(result.verdict['text'])}", "",
           f"BASE {_md(b['path'], code=True)} ({b['steps']} steps) → NEW {_md(n['path'], code=True)} ({n['steps']} steps)",
           "",
           "| per step | BASE | NEW | delta | change |", "|---|---:|---:|---:|---:|"]
    out += [f"| {' | '.join(r)} |" for r in _totals(result)]
    out += ["", "| class | BASE | NEW | delta | change |", "|---|---:|---:|---:|---:|"]
    out += [f"| {_md(c.name)} | {_ns(c.base_ns)} | {_ns(c.new_ns)} | {_ns(c.delta_ns, True)} | {_pct(c.pct)} |"
            for c in result.classes]
    out += ["", "**Biggest movers**", "", "| kernel | class | BASE | NEW | delta | change |",
            "|---|---|---:|---:|---:|---:|"]
    out += [f"| {_md(c.name[:70], code=True)} | {_md(c.kernel_class)} | {_ns(c.base_ns)} | {_ns(c.new_ns)} | "
            f"{_ns(c.delta_ns, True)} | {_pct(c.pct)} |" for c in result.movers[:top]]
    out += [""] + [f"> note: {_md(note)}" for note in result.notes]
    return "\n".join(out).rstrip() + "\n"
