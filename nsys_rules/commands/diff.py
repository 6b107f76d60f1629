"""``nsys-rules diff BASE... [--new NEW...]``: the median step before and after with its interval, why it moved, a gate."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any


from nsys_rules.analysis.shift import Shift
from nsys_rules.diff import DEFAULT_GATE_PCT, DEFAULT_HOST_SPREAD_PCT, Change, DiffResult, Run, compare, run_of
from nsys_rules.errors import ExitCode, UsageError
from nsys_rules.formatters.fitted import fitted_table
from nsys_rules.formatters.json_out import json_text
from nsys_rules.formatters.layout import COMPACT_FILE_WIDTH, FILE_WIDTH, fit, one_line, output_width
from nsys_rules.formatters.markdown import cell, code_cell
from nsys_rules.formatters.short_names import distinct_names
from nsys_rules.inputs import open_trace
from nsys_rules.textsafe import output_safe
from nsys_rules.units import human_ns, plain_number
from nsys_rules.model.windows import SteadyOptions
from nsys_rules.commands.common import add_plugin_flags, number_arg, registry_for, settings_for, whole_number_arg
from nsys_rules.containment import report_stream

FORMATS = ("table", "compact", "json", "markdown")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("diff", help="compare runs per step: did the step get slower, how sure is that, and why",
                       description="Compare the steady steps of BASE and NEW: the change of the median step with a "
                                   "95 % interval (steps resampled within each run; with 2+ runs on a side, the "
                                   "between-run variation measured from the runs' medians), apart for the GPU work "
                                   "and the host/idle time, each budget part, kernel class and kernel. Verdict: "
                                   "slower, faster, no change or inconclusive. `diff BASE NEW` compares two traces; "
                                   "`diff BASE1 BASE2 ... --new NEW1 NEW2 ...` pools several runs per side. Exit 1 "
                                   "only when the whole interval of the time per step lies above --gate percent; "
                                   "exit 2 when a trace has no steps or the traces are not runs of one program and "
                                   "step (--force compares anyway).")
    p.add_argument("base", metavar="BASE", nargs="+",
                   help="the reference trace(s) (.sqlite export or parquetdir/arrowdir folder); without --new, "
                        "exactly two traces: BASE then NEW")
    p.add_argument("--new", metavar="NEW", nargs="+", dest="new",
                   help="the run(s) to judge; the positional traces are then all BASE's runs")
    p.add_argument("--format", default="table", choices=FORMATS,
                   help="table (default), compact (the table at most as wide as the compact check), json or markdown")
    p.add_argument("--gate", type=number_arg, default=DEFAULT_GATE_PCT, metavar="PCT",
                   help=f"fail (exit 1) when the time per step grew by more than PCT percent with 95 %% confidence "
                        f"(the interval's lower end above PCT; default {plain_number(DEFAULT_GATE_PCT)})")
    p.add_argument("--host-spread", type=number_arg, default=DEFAULT_HOST_SPREAD_PCT, metavar="PCT",
                   help="with one run per side: the run-to-run spread of the host-caused idle time per step to "
                        f"assume, percent of it (default {plain_number(DEFAULT_HOST_SPREAD_PCT)}); 2+ runs on a side measure it")
    p.add_argument("--force", action="store_true",
                   help="compare traces that do not look like runs of one program and step")
    p.add_argument("--top", type=whole_number_arg, default=10, metavar="N", help="movers to list (default 10)")
    p.add_argument("--config", metavar="FILE", help="config file (steady-ranges and max-memory are used)")
    p.add_argument("--max-memory", metavar="SIZE",
                   help="stop (exit 3) before reading a trace that would not fit in SIZE (512M, 8G), as check does "
                        "(default: the config's max-memory, else 80 %% of the free memory)")
    add_plugin_flags(p)
    p.set_defaults(run=run)


def _paths(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.new:
        return list(args.base), list(args.new)
    if len(args.base) != 2:
        raise UsageError(f"diff takes BASE and NEW, or several runs as `diff BASE1 BASE2 ... --new NEW1 NEW2 ...`; "
                         f"got {len(args.base)} trace(s) without --new")
    return [args.base[0]], [args.base[1]]


def run(args: argparse.Namespace) -> int:
    if not math.isfinite(args.gate) or args.gate < 0:
        raise UsageError(f"--gate must be a percentage >= 0, not {args.gate!r}")
    if not math.isfinite(args.host_spread) or not 0 <= args.host_spread <= 1000:
        raise UsageError(f"--host-spread must be a percentage from 0 to 1000, not {args.host_spread!r}")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    bases, news = _paths(args)
    registry = registry_for(args)
    settings = settings_for(args, registry)
    steady = SteadyOptions(tuple(settings.steady_ranges))
    sides: list[list[Run]] = [[], []]
    for side, paths in zip(sides, (bases, news), strict=True):
        for path in paths:
            trace = open_trace(Path(path), registry.loaders, settings.export_format, settings.max_memory)
            try:
                side.append(run_of(trace, steady))
            finally:
                trace.close()
    result = compare(sides[0], sides[1], args.gate, force=args.force, host_spread_pct=args.host_spread)
    if args.format == "json":
        text = json_text(result.to_json(args.top))
    elif args.format == "markdown":
        text = render_markdown(result, args.top)
    else:
        width = output_width()
        # compact, as check takes it (issue 42: refused): the same table, laid out no wider than the compact layout.
        text = render_table(result, args.top, min(width, COMPACT_FILE_WIDTH) if args.format == "compact" else width)
    text = output_safe(text, args.format)  # names from the files must not drive the terminal or the CI log
    report_stream().write(text)
    report_stream().flush()
    return int(ExitCode.FINDINGS if result.regressed else ExitCode.OK)


def _pct(value: float | None) -> str:
    return "new" if value is None else f"{value:+.1f} %"


def _interval(shift: Shift | None) -> str:
    """``+5.5 % .. +6.1 %``: the 95 % interval of a median's change, in percent of BASE (ns for new work)."""
    if shift is None:
        return ""
    if shift.low_pct is None or shift.high_pct is None:
        return f"{human_ns(shift.low, signed=True)} .. {human_ns(shift.high, signed=True)}"
    return f"{shift.low_pct:+.1f} % .. {shift.high_pct:+.1f} %"


def _sentences(result: DiffResult) -> list[str]:
    """What moved and how sure, one sentence each (the verdict's text after its line)."""
    return list(result.verdict["reasons"])


def _totals(result: DiffResult) -> list[list[str]]:
    """Median per step of the four totals, with the change, its interval, the verdict and the in-run spreads."""
    rows = []
    labels = {"step": "time per step", "gpu": result.gpu_label.replace(" per step", ""),
              "idle": "host/idle time", "host": "  of it host-caused"}
    for name in ("step", "gpu", "idle", "host"):
        s = result.totals[name]
        if name == "host" and not (s.base or s.new):
            continue
        rows.append([labels[name], human_ns(s.base), human_ns(s.new), human_ns(s.estimate, signed=True),
                     _pct(s.estimate_pct), _interval(s), result.said(name),
                     f"{human_ns(s.base_spread)} / {human_ns(s.new_spread)}"])
    return rows


TOTAL_HEADERS = ["median per step", "BASE", "NEW", "delta", "change", "95 % interval", "verdict", "in-run sd B/N"]


def _change(c: Change) -> list[str]:
    """BASE, NEW (medians), delta, change, interval and verdict of one part, class or kernel."""
    s = c.shift
    if s is None:
        return [human_ns(c.base_ns), human_ns(c.new_ns), human_ns(c.delta_ns, signed=True), _pct(c.pct), "", ""]
    return [human_ns(s.base), human_ns(s.new), human_ns(s.estimate, signed=True), _pct(s.estimate_pct),
            _interval(s), c.verdict]


CHANGE_HEADERS = ["BASE", "NEW", "delta", "change", "95 % interval", "verdict"]


def _md_row(cells: list[str]) -> str:
    return f"| {' | '.join(cells)} |"


def _side(label: str, side: dict[str, Any]) -> str:
    runs = int(side.get("runs", 1) or 1)
    where = one_line(side["path"]) if runs == 1 else f"{runs} runs ({', '.join(map(one_line, side['paths']))})"
    return f"{label} {where}: {one_line(side['window'])}"


def _shown(rows: list[Change]) -> list[Change]:
    return [c for c in rows if c.base_ns or c.new_ns or (c.shift is not None and (c.shift.base or c.shift.new))]


def render_table(result: DiffResult, top: int = 10, width: int = FILE_WIDTH) -> str:
    """Plain-text report, ``width`` columns wide: kernel names cut to fit (and kept apart), and a table
    whose numbers alone are too wide as one block per row (:func:`fitted_table`)."""
    name_w = max(20, min(90, width - 80))
    out = fit([_side("BASE", result.base), _side("NEW ", result.new)], width) + [""]
    out += fitted_table(TOTAL_HEADERS, _totals(result), width)
    out += ["", *fit(["the step by part (median per step, ranked by the size of the change):"], width)]
    out += fitted_table(["part", *CHANGE_HEADERS], [[one_line(c.kernel_class), *_change(c)] for c in _shown(result.parts)],
                        width)
    out += ["", "GPU time by kernel class:"]
    out += fitted_table(["class", *CHANGE_HEADERS], [[one_line(c.name), *_change(c)] for c in _shown(result.classes)],
                        width)
    movers = result.movers[:top]
    names = distinct_names([c.name for c in movers], name_w) if width >= 120 else {c.name: one_line(c.name)
                                                                                   for c in movers}
    out += ["", f"biggest movers (top {top}):"]
    out += fitted_table(["kernel", "class", *CHANGE_HEADERS],
                        [[names[c.name], one_line(c.kernel_class), *_change(c)] for c in movers], width)
    out += [""] + fit([f"verdict: {result.line}"] + [f"  - {one_line(s)}" for s in _sentences(result)]
                      + [f"note: {one_line(note)}" for note in result.notes], width)
    return "\n".join(out) + "\n"


def render_markdown(result: DiffResult, top: int = 10) -> str:
    """PR-comment Markdown; its first line is the verdict a bot acts on."""
    # Fail, undecided (more runs needed), pass: what a reader of the PR sees first.
    icon = "❌" if result.regressed else "⚠️" if result.step_verdict == "inconclusive" else "✅"
    b, n = result.base, result.new
    out = [f"## nsys-rules diff {icon} {cell(result.line, 1000)}", "",
           ] + [f"- {cell(s, 1000)}" for s in _sentences(result)] + ["",
           f"BASE {_md_paths(b)} ({b['steps']} steps) → NEW {_md_paths(n)} ({n['steps']} steps)",
           "", _md_row(TOTAL_HEADERS), "|---|---:|---:|---:|---:|---|---|---:|"]
    out += [_md_row([cell(x) for x in r]) for r in _totals(result)]
    out += ["", _md_row(["part of the step", *CHANGE_HEADERS]), "|---|---:|---:|---:|---:|---|---|"]
    out += [_md_row([cell(c.kernel_class), *_change(c)]) for c in _shown(result.parts)]
    out += ["", _md_row(["kernel class", *CHANGE_HEADERS]), "|---|---:|---:|---:|---:|---|---|"]
    out += [_md_row([cell(c.name), *_change(c)]) for c in _shown(result.classes)]
    movers = result.movers[:top]
    names = distinct_names([c.name for c in movers], 90)
    out += ["", "**Biggest movers**", "", _md_row(["kernel", "class", *CHANGE_HEADERS]),
            "|---|---|---:|---:|---:|---:|---|---|"]
    out += [_md_row([code_cell(names[c.name], 200), cell(c.kernel_class), *_change(c)]) for c in movers]
    out += [""] + [f"> note: {cell(note, 1000)}" for note in result.notes]
    return "\n".join(out).rstrip() + "\n"


def _md_paths(side: dict[str, Any]) -> str:
    paths = side.get("paths") or [side["path"]]
    return ", ".join(code_cell(p, 300) for p in paths)
