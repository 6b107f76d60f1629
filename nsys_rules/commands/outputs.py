"""``check`` flags for where findings go besides stdout: baselines, an HTML file, the GitHub job summary.

Kept apart from ``check.py`` so that the command stays a short list of steps:
:func:`add_output_flags` at parser time, :func:`prepare` before the engine runs (does the
chosen output need the steady-state profile? is the baseline readable?), and :func:`finish`
after it (drop baselined findings, write the side files).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from nsys_rules.errors import UsageError
from nsys_rules.outpaths import append_atomic, guard_outputs, write_atomic
from nsys_rules.textsafe import output_safe

if TYPE_CHECKING:  # imported when a command runs: parsing the flags needs none of them
    from nsys_rules.settings import Settings
    from nsys_rules.report import Report
    from nsys_rules.registry import Registry


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """``--baseline``, ``--write-baseline``, ``--html`` and ``--github-summary``."""
    p.add_argument("--baseline", metavar="FILE",
                   help="report only findings whose fingerprint is not in FILE (a --write-baseline file or a json report)")
    p.add_argument("--baseline-gate", metavar="PCT", type=_gate_pct, default=None,
                   help="with --baseline: a known finding whose saving grew by more than PCT percent (and 1 ms) is "
                        "shown as worse and counts for --fail-on (default 20)")
    p.add_argument("--write-baseline", metavar="FILE", help="write the fingerprints of this run's findings to FILE")
    p.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report to FILE")
    p.add_argument("--github-summary", action="store_true",
                   help="append the markdown summary to $GITHUB_STEP_SUMMARY when that variable is set")


def _gate_pct(text: str) -> float:
    """``--baseline-gate``: a percent, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a percent (a number, 0 or more, e.g. 20)")
    return value


def prepare(args: argparse.Namespace, registry: Registry, settings: Settings,
            inputs: Iterable[Path] = ()) -> dict[str, int | None] | None:
    """Before the run: refuse an output that would overwrite an input or an export; turn on the
    profile when an output draws it; read the baseline early (fail fast)."""
    guard_outputs({"--html": getattr(args, "html", None), "--write-baseline": getattr(args, "write_baseline", None),
                   "$GITHUB_STEP_SUMMARY": _summary_path(args)},
                  [*inputs, *([Path(settings.source)] if settings.source else []),
                   *([Path(args.baseline)] if getattr(args, "baseline", None) else [])],
                  may_replace={"--write-baseline": getattr(args, "baseline", None)})
    wanted = [registry.formatters.get(args.format)]
    if getattr(args, "html", None):
        wanted.append(registry.formatters.get("html"))
    if getattr(args, "github_summary", False) and os.environ.get("GITHUB_STEP_SUMMARY"):
        wanted.append(registry.formatters.get("markdown"))
    if any(getattr(f, "needs_profile", False) for f in wanted if f is not None):
        settings.profile = True
    if getattr(args, "baseline_gate", None) is not None and not getattr(args, "baseline", None):
        raise UsageError("--baseline-gate needs --baseline FILE: it says when a known finding got worse")
    if getattr(args, "baseline", None):
        from nsys_rules.baseline import read_baseline

        return read_baseline(Path(args.baseline))
    return None


def finish(args: argparse.Namespace, report: Report, registry: Registry, baseline: dict[str, int | None] | None) -> None:
    """After the run: write the baseline (of everything found), then apply the one given, then side files."""
    from nsys_rules.baseline import DEFAULT_GATE_PCT, apply_baseline, write_baseline

    if getattr(args, "write_baseline", None):
        write_baseline(report, Path(args.write_baseline))
        _wrote(f"the baseline ({len(report.findings)} finding(s))", args.write_baseline)
    if baseline is not None:
        gate = getattr(args, "baseline_gate", None)
        dropped, worse = apply_baseline(report, baseline, args.baseline, DEFAULT_GATE_PCT if gate is None else gate)
        grown = f"; {worse} known finding(s) grew past the gate and are shown as worse" if worse else ""
        sys.stderr.write(f"nsys-rules: {dropped} finding(s) already in the baseline {args.baseline} not shown{grown}\n")
    if getattr(args, "html", None):
        _write(Path(args.html), _render(registry, "html", report), "HTML report")
        _wrote("the HTML report", args.html)
    summary = _summary_path(args)
    if summary:
        # Markdown as the markdown format prints it: escapes shown, workflow commands not run.
        append_atomic(Path(summary), output_safe(_render(registry, "markdown", report), "markdown") + "\n",
                      "$GITHUB_STEP_SUMMARY")
        _wrote("the markdown summary (appended)", f"{summary} ($GITHUB_STEP_SUMMARY)")
    elif getattr(args, "github_summary", False):
        # Outside GitHub Actions the flag has nowhere to write: say so rather than end silently (issue 42).
        sys.stderr.write("nsys-rules: --github-summary: $GITHUB_STEP_SUMMARY is not set (GitHub Actions sets it in "
                         "a job), so no summary was written\n")


def _wrote(what: str, where: str) -> None:
    """One stderr line per side file, so a run that wrote one says where (stdout holds the report)."""
    from nsys_rules.textsafe import clip_value, terminal_safe

    sys.stderr.write(f"nsys-rules: wrote {what} to {terminal_safe(clip_value(where, 300))}\n")


def _summary_path(args: argparse.Namespace) -> str | None:
    return os.environ.get("GITHUB_STEP_SUMMARY") or None if getattr(args, "github_summary", False) else None


def _render(registry: Registry, name: str, report: Report) -> str:
    from nsys_rules.isolation import call_plugin

    formatter: Any = registry.formatters.get(name)
    if formatter is None:
        raise UsageError(f"the {name} format is not available")
    return str(call_plugin(formatter, f"the {name!r} format", report))


def _write(path: Path, text: str, what: str) -> None:
    write_atomic(path, text, what)
