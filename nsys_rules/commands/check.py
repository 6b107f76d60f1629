"""``nsys-rules check TRACE...``: run the rules and print findings.

Imports nothing heavy at load time: :func:`run` starts reading the trace (``loaders.readahead``)
before it imports the engine, the rules and pandas, so the read overlaps their import.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nsys_rules.errors import ExitCode, InputError, PluginError, UsageError
from nsys_rules.loaders import EXPORT_FORMATS, readahead
from nsys_rules.textsafe import ci_log_safe, clip_value, output_safe
from nsys_rules.commands.common import (FAIL_CHOICES, add_filter_flags, add_plugin_flags, registry_for, settings_for,
                                        whole_number_arg)
from nsys_rules.commands.outputs import add_output_flags, finish, prepare
from nsys_rules.containment import report_stream

if TYPE_CHECKING:
    from nsys_rules.records import RunError
    from nsys_rules.registry import Registry
    from nsys_rules.report import Report
    from nsys_rules.settings import Settings


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("check", help="run the rules on one or more traces",
                       description="Run the rules on nsys exports (SQLite, parquetdir, arrowdir) and print what to "
                                   "optimize next.")
    p.add_argument("traces", nargs="+", metavar="TRACE",
                   help="nsys .sqlite export, parquetdir/arrowdir export folder, .nsys-rep, or a folder of them")
    add_check_options(p)
    p.set_defaults(run=run)


def add_check_options(p: argparse.ArgumentParser) -> None:
    """Every ``check`` flag (all but the traces); ``profile`` takes the same ones for the check it runs."""
    p.add_argument("--format", default="table",
                   help="table (default; the compact layout below 120 columns), compact, json, sarif, markdown, html, "
                        "or a plugin's format")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list every skipped rule with its reason (the JSON always has them)")
    p.add_argument("--select", action="append", metavar="RULES", help="only these rules (comma-separated; NVIDIA names work)")
    p.add_argument("--ignore", action="append", metavar="RULES", help="skip these rules (comma-separated)")
    p.add_argument("--fail-on", choices=FAIL_CHOICES, help="exit 1 when a finding reaches this severity (default error)")
    p.add_argument("--config", metavar="FILE", help="config file (default: nearest nsys-rules.toml or pyproject.toml)")
    p.add_argument("--set", action="append", metavar="RULE.OPTION=VALUE", help="override one rule option")
    p.add_argument("--max-memory", metavar="SIZE", help="stop with exit 3 when a trace would need more (e.g. 2G)")
    p.add_argument("--noise-floor", metavar="PCT",
                   help="findings (not errors) saving less than PCT %% of the steady state are listed as minor "
                        "(default 0.5)")
    p.add_argument("--rule-timeout", metavar="SECONDS",
                   help="stop a rule that runs longer and report it as failed (exit 4); default 300")
    p.add_argument("--max-findings", metavar="N",
                   help="keep at most N findings per rule and trace, noting how many more there were "
                        "(default 1000; 0: no limit)")
    p.add_argument("--jobs", "-j", type=whole_number_arg, default=1, metavar="N",
                   help="analyze up to N traces at once in worker processes (0: one per CPU); they share --max-memory")
    p.add_argument("--dask", metavar="SCHEDULER", help="run the per-trace work on Dask distributed: a scheduler "
                   "address (tcp://host:8786) or 'local' for a local cluster of --jobs workers (pip install 'nsys-rules[dask]')")
    p.add_argument("--dask-timeout", metavar="SECONDS", default=None,
                   help="give up on a --dask scheduler that does not answer within SECONDS (default 10)")
    p.add_argument("--export-format", choices=EXPORT_FORMATS, default="sqlite",
                   help="what a .nsys-rep is exported to first with nsys: sqlite (default), parquetdir (faster to "
                        "read) or arrowdir")
    p.add_argument("--what-if", action="append", metavar="RULES",
                   help="replay the median step with these rules' fixes (comma-separated, e.g. launch-bound,sync-stall) "
                        "and show its budget before and after")
    p.add_argument("--require-trusted", action="store_true",
                   help="exit 3 when a trace's validity verdict is untrustworthy (records the findings rest on were "
                        "lost), after the report; for CI")
    p.add_argument("--no-gpu-metrics", action="store_true",
                   help="leave the trace's GPU metrics samples unread (the budget then carries no measured activity)")
    add_filter_flags(p)
    add_plugin_flags(p)
    add_output_flags(p)


def run(args: argparse.Namespace) -> int:
    if len(args.traces) == 1 and args.jobs == 1 and not args.dask:
        readahead.start(args.traces[0], limit_set=_memory_limit_set(args))
    try:
        return _run(args)
    finally:
        readahead.stop()  # a run that ended early (a usage error) must not wait for reads it will not use


def _memory_limit_set(args: argparse.Namespace) -> bool:
    """Whether the user limits memory (flag or config file): then the guard sees every read first."""
    from nsys_rules.config import configured_max_memory, find_config, tomllib

    try:
        path = Path(args.config) if getattr(args, "config", None) else find_config(Path.cwd())
        return configured_max_memory(getattr(args, "max_memory", None), path) is not None
    except (OSError, UnicodeDecodeError, UsageError, tomllib.TOMLDecodeError, RecursionError):
        return True  # settings_for reports the flag or the file; nothing is read before it does


def _dask_timeout(args: argparse.Namespace) -> float:
    """``--dask-timeout`` in seconds (the default when not given)."""
    from nsys_rules.config import parse_seconds
    from nsys_rules.dask_connect import DEFAULT_DASK_TIMEOUT

    value = getattr(args, "dask_timeout", None)
    return DEFAULT_DASK_TIMEOUT if value is None else parse_seconds(value, "--dask-timeout")


def check_setup(args: argparse.Namespace) -> tuple[Registry, Settings]:
    """The registry and settings of a ``check`` (``profile`` checks them before it captures); the format checked."""
    registry = registry_for(args)
    settings = settings_for(args, registry)
    if args.format not in registry.formatters:
        raise UsageError(f"unknown --format {args.format!r}; choose from {', '.join(sorted(registry.formatters))}")
    if getattr(args, "verbose", False):
        # A config file found in a parent folder can set fail-on, select or thresholds unseen: -v names it
        # (the JSON report always does, as tool.config).
        sys.stderr.write(f"nsys-rules: config file: {clip_value(settings.source, 300)}\n" if settings.source else
                         "nsys-rules: config file: none (no nsys-rules.toml, nor pyproject.toml with "
                         "[tool.nsys-rules], here or in a parent folder)\n")
        from nsys_rules.nsys_locate import ignored_note, locate_nsys

        note = ignored_note(locate_nsys(getattr(args, "nsys", None)))  # nsys exports a .nsys-rep; profile captures
        if note:
            sys.stderr.write(f"nsys-rules: {clip_value(note, 400)}\n")
    elif settings.source and not getattr(args, "config", None) and _from_a_parent_folder(settings.source):
        # A config file found above the working folder (a checkout's, a home folder's) sets fail-on, select or
        # thresholds this run never named: said every time, not only under -v.
        sys.stderr.write(f"nsys-rules: config file: {clip_value(settings.source, 300)} (found in a parent folder; "
                         "it sets this run's fail-on, selection and options)\n")
    return registry, settings


def _from_a_parent_folder(source: str) -> bool:
    """Whether the config file ``source`` lies above the working folder rather than in it."""
    try:
        return Path(source).resolve().parent != Path.cwd().resolve()
    except (OSError, RuntimeError):
        return False


def _run(args: argparse.Namespace) -> int:
    from nsys_rules.isolation import call_plugin
    # Bound here, before any plugin loads: a plugin that patches Report.exit_code cannot change the exit code.
    from nsys_rules.report import exit_code_of

    registry, settings = check_setup(args)
    report = build_report(args, registry, settings)
    text = call_plugin(registry.formatters[args.format], f"the {args.format!r} format", report)
    if not isinstance(text, str):
        raise PluginError(f"the {args.format!r} format returned {type(text).__name__}, not text")
    text = output_safe(text, args.format)  # names from the file must not drive the terminal or the CI log
    # Written in one call so that output is complete or absent.
    report_stream().write(text)
    report_stream().flush()
    for line in failure_lines(report):
        sys.stderr.write(line + "\n")
    if getattr(args, "announce_validity", False):  # profile: what it just captured, judged before the findings
        for line in validity_lines(report):
            sys.stderr.write(line + "\n")
    untrusted = untrusted_lines(report) if getattr(args, "require_trusted", False) else []
    for line in untrusted:
        sys.stderr.write(line + "\n")
    return int(ExitCode.BAD_INPUT) if untrusted else int(exit_code_of(report))


def build_report(args: argparse.Namespace, registry: Registry, settings: Settings) -> Report:
    """The pipeline of ``check`` after its setup: inputs expanded, outputs guarded, traces analyzed (in turn, in
    workers or on Dask), the baseline applied and the side files written. The command formats what this returns;
    :func:`nsys_rules.check` (the Python API) returns it to the caller."""
    from nsys_rules.engine import run_check
    from nsys_rules.inputs import expand_inputs, open_trace
    from nsys_rules.parallel import default_jobs, run_many
    from nsys_rules.report import exit_code_of

    if args.dask is not None and not args.dask.strip():
        raise UsageError("--dask needs a scheduler address (tcp://host:8786) or 'local'")
    dask_timeout = _dask_timeout(args)
    paths = expand_inputs(args.traces, registry.loaders)
    baseline = prepare(args, registry, settings, paths)
    if getattr(args, "own_process", False):
        # The process is ours (the console script): a rule that ignores --rule-timeout ends it, after the report.
        from nsys_rules.deadline import install

        install(lambda error: _write_known(args, registry, error))
    if len(paths) > 1 or args.jobs != 1 or args.dask:
        # Several traces: per-trace tasks (pool, Dask or in turn) and the cross-trace summary.
        jobs = default_jobs() if args.jobs == 0 else args.jobs
        report = run_many(paths, registry, settings, jobs=jobs, dask=args.dask,
                          autoload_plugins=not getattr(args, "no_plugins", False), dask_timeout=dask_timeout)
    else:
        report = run_check(paths, registry, settings,
                           lambda p: open_trace(p, registry.loaders, settings.export_format, settings.max_memory))
    report.verbose = bool(getattr(args, "verbose", False))
    if exit_code_of(report) == ExitCode.BAD_INPUT:
        # No trace recorded any CUDA activity: nothing at all was judged. Exit 3 is one line, as for
        # an unreadable input (a mixed run reports such a trace in its own line instead).
        names = ", ".join(clip_value(os.path.basename(r.info.path), 120) for r in report.results[:5])
        raise InputError(f"{names}{', ...' if len(report.results) > 5 else ''}: no CUDA activity (no CUDA API "
                         "call, kernel, copy or memset was recorded), so there is nothing to judge; capture with "
                         "`nsys profile --trace=cuda` and check that the program uses the GPU")
    finish(args, report, registry, baseline)
    return report


def validity_lines(report: Report) -> list[str]:
    """Per trace: its validity verdict, and for each reason worse than a note what it touches and its fix."""
    out = []
    for result in report.results:
        validity = result.info.validity or {}
        verdict = validity.get("verdict")
        if verdict is None:
            continue
        out.append(f"nsys-rules: capture {clip_value(result.info.path, 200)}: {verdict}")
        out += [f"nsys-rules:   {r['level']}: {clip_value(r['message'], 300)}; fix: {clip_value(r['fix'], 300)}"
                for r in validity.get("reasons", [])]
    return out


def untrusted_lines(report: Report) -> list[str]:
    """One line per trace whose validity verdict is untrustworthy (``--require-trusted`` then exits 3)."""
    out = []
    for result in report.results:
        validity = result.info.validity or {}
        if validity.get("verdict") == "untrustworthy":
            why = "; ".join(r["message"] for r in validity.get("reasons", []) if r.get("level") == "untrustworthy")
            out.append(f"nsys-rules: {clip_value(result.info.path, 200)} is untrustworthy (--require-trusted): "
                       f"{clip_value(why, 400)}")
    return out


def _write_known(args: argparse.Namespace, registry: Registry, error: RunError) -> None:
    """The deadline passed (a rule would not stop): the report of what is known to stdout, the failure lines to
    stderr. Runs in the watchdog thread while the rule still runs, so it writes to the descriptors themselves
    (the rule may hold a stream's lock); side files (--html, baselines) are not written."""
    from nsys_rules.containment import real_stdout_fd
    from nsys_rules.engine import report_so_far

    report = report_so_far(error)
    report.verbose = bool(getattr(args, "verbose", False))
    text = str(registry.formatters[args.format](report))  # a plugin's format may return anything
    text = output_safe(text, args.format)
    _write_fd(real_stdout_fd(), text)
    _write_fd(2, "".join(line + "\n" for line in failure_lines(report)))


def _write_fd(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        written = os.write(fd, data)
        data = data[written:]


def failure_lines(report: Report) -> list[str]:
    """One stderr line per failed rule or plugin (exit 4), naming it: the report itself may be JSON on stdout."""
    plugin_of = {r["name"]: r.get("plugin", "") for r in report.rules}
    lines = []
    for e in report.all_errors:
        rule = e.rule
        who = (f"rule {rule}" + (f" (plugin {plugin_of[rule]})" if plugin_of.get(rule) else "") if rule
               else f"plugin {e.plugin}" if e.plugin else "trace")
        where = f" on {e.trace}" if e.trace else ""
        lines.append(ci_log_safe(f"nsys-rules: {clip_value(who, 120)} failed{clip_value(where, 200)}: "
                                 f"{clip_value(e.error, 300)}"))
    return lines
