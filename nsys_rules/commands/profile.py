"""``nsys-rules profile [options] -- CMD ...``: capture with the standard nsys flags, then check the export.

Steps: preflight (nsys found, release build, environment), the command (printed shell-quoted: the
user's program and arguments are data), the capture with the program's output passed through to
stderr (stdout stays for the report), then ``check`` on what nsys wrote, with every ``check``
flag. ``--python`` adds nsys's Python sampling and backtraces (``capture.PYTHON_FLAGS``) and exports
the report with its NVTX payloads, where the Python frames are. Exit codes: those of ``check``; 2
when the preflight stops (debug build, bad flags); 3 when nsys is missing or wrote no export; 4 when
the profiled program failed (the partial trace, if nsys wrote one, is still checked).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from nsys_rules import capture
from nsys_rules.capture import CaptureOptions, Problem
from nsys_rules.options import effective_options, select_rules
from nsys_rules.errors import ExitCode, InputError, UsageError
from nsys_rules.nsys_locate import NsysLocation, importer_problem, locate_nsys, missing_parts, off_path_note
from nsys_rules.nsys_run import export_time_limit
from nsys_rules.textsafe import clip_value, shell_join, shell_word, terminal_safe
from nsys_rules.commands.common import whole_number_arg
from nsys_rules.commands import check
from nsys_rules.commands.outputs import prepare
from nsys_rules.outpaths import guard_outputs, write_atomic
from nsys_rules.containment import report_stream

#: How many of the program's last output lines a failure shows.
TAIL_LINES = 12


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile", help="capture CMD with nsys (the standard flags), then check the export",
        usage="nsys-rules profile [options] -- CMD [ARG ...]",
        description="Check that the capture can be trusted (nsys found, release build, environment), run "
                    "`nsys profile --force-overwrite=true --cuda-graph-trace=node --export=sqlite "
                    f"--trace={capture.DEFAULT_TRACE} -o {capture.DEFAULT_FOLDER}/<name> CMD`, then check the "
                    "export with the check options below.")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]",
                   help="the program to profile and its arguments, after `--`")
    p.add_argument("-o", "--output", metavar="NAME",
                   help=f"report name without suffix (default {capture.DEFAULT_FOLDER}/<program>); nsys's patterns "
                        "%%h (host), %%p (pid), %%n (sequence) and %%q{VAR} (environment variable) work, e.g. "
                        "'run_%%q{RANK}' for one report per rank")
    p.add_argument("--trace", default=capture.DEFAULT_TRACE,
                   help=f"what nsys traces (default {capture.DEFAULT_TRACE}; e.g. cuda,nvtx,osrt)")
    p.add_argument("--profiler-range", nargs="?", const="stop", metavar="END",
                   help="capture only between cudaProfilerStart and cudaProfilerStop (-c cudaProfilerApi); "
                        "END: stop (default) or repeat:N")
    p.add_argument("--delay", type=whole_number_arg, metavar="SECONDS", help="start collecting after SECONDS (nsys --delay)")
    p.add_argument("--duration", type=whole_number_arg, metavar="SECONDS", help="collect for SECONDS (nsys --duration)")
    p.add_argument("--metrics", action="store_true",
                   help="also sample GPU metrics (nsys --gpu-metrics-devices=all: DRAM, SM, tensor and PCIe activity), "
                        "so check measures what each part of the step does; needs access to the GPU's counters "
                        "(`nsys-rules doctor` says)")
    p.add_argument("--metrics-frequency", metavar="HZ",
                   help="GPU metrics samples per second (nsys --gpu-metrics-frequency, 10-200000; default 10000); "
                        "implies --metrics")
    p.add_argument("--python", action="store_true",
                   help="also record where the Python code spends host time and makes each sync: "
                        f"{' '.join(capture.PYTHON_FLAGS)}, then `nsys export --include-blobs=true` (the frames); "
                        "Python sampling slows the host, so read the times as shares")
    p.add_argument("--nsys-arg", action="append", default=[], metavar="FLAG",
                   help="one more nsys profile flag, as --nsys-arg=--cuda-memory-usage=true (repeatable)")
    p.add_argument("--nsys", metavar="PATH", help="the nsys binary to use (default: $NSYS_RULES_NSYS, PATH, "
                   "then the standard install places)")
    p.add_argument("--allow-debug", action="store_true", help="profile a debug build anyway")
    p.add_argument("--dry-run", action="store_true", help="print the nsys command and the preflight verdict; run nothing")
    p.add_argument("--command-file", metavar="FILE",
                   help="also write the nsys flags (all but -o) to FILE, for `nsys profile --command-file=FILE`; "
                        "with --dry-run this file is the one thing written (the line says so)")
    check.add_check_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        raise UsageError("profile needs the program to run after `--`, e.g. nsys-rules profile -- python bench.py")
    if command[0].startswith("-"):
        # nsys reads every leading word that starts with '-' as its own option: the program would never run.
        raise UsageError(f"the program to profile, {clip_value(command[0], 60)!r}, starts with '-': nsys would read "
                         "it as its own option; pass nsys flags with --nsys-arg, and a program named like an option "
                         "as ./NAME")
    options = _options(args, command)
    if not args.dry_run:
        options = _fresh_output(args, options)
    config = _validate_check_options(args)
    if args.command_file:
        _guard_command_file(args, options, config)
    location = locate_nsys(args.nsys)
    problems = preflight(command, options, location, allow_debug=args.allow_debug)
    nsys_cmd = capture.nsys_command(str(location.path) if location.path else "nsys", options, command)
    if args.command_file:
        _write_command_file(Path(args.command_file), options, dry_run=args.dry_run)
    if args.dry_run:
        report_stream().write(shell_join(nsys_cmd) + "\n")
        if options.python:  # the export that keeps the Python frames, run after the capture
            report_stream().write(shell_join(capture.export_command(nsys_cmd[0], f"{options.output}.nsys-rep")) + "\n")
        report_stream().flush()
    stop = _report_problems(problems, verdict=args.dry_run)
    if args.dry_run or stop:
        return int(stop or ExitCode.OK)
    _say(f"running: {shell_join(nsys_cmd)}")
    return _capture_and_check(args, nsys_cmd, options)


#: What nsys writes for a report name: a report that exists under one of these is never replaced.
_WRITTEN = (".nsys-rep", ".sqlite", ".qdstrm")


def _fresh_output(args: argparse.Namespace, options: CaptureOptions) -> CaptureOptions:
    """A report name nothing exists under yet: nsys runs with --force-overwrite, and a capture that writes no
    export must not have an older one of its name checked in its place.

    ``-o NAME`` that exists is refused (exit 2); the default name gets the first free ``NAME-2``, ``NAME-3``...
    A name with nsys's ``%`` patterns (one report per rank or host) is left as it is: its files are told
    apart by their times (:func:`~nsys_rules.capture.written_files`).
    """
    output = options.output
    if "%" in output:
        return options

    def taken(name: str) -> str | None:
        return next((name + s for s in _WRITTEN if os.path.lexists(name + s)), None)

    found = taken(output)
    if found is None:
        return options
    if args.output:
        raise UsageError(f"-o {clip_value(output, 200)}: {clip_value(found, 200)} exists, and the capture would replace "
                         "it; choose another name or remove it first")
    for n in range(2, 10_000):
        candidate = f"{output}-{n}"
        if taken(candidate) is None:
            _say(f"{terminal_safe(found, newlines=False)} exists: this capture is {terminal_safe(candidate, newlines=False)}")
            return dataclasses.replace(options, output=candidate)
    raise UsageError(f"{clip_value(output, 200)}-2 to -9999 all exist; choose a name with -o")


def _options(args: argparse.Namespace, command: list[str]) -> CaptureOptions:
    for name in ("delay", "duration"):
        if getattr(args, name) is not None and getattr(args, name) < 0:
            raise UsageError(f"--{name} takes whole seconds >= 0")
    output = capture.normalize_output(args.output or f"{capture.DEFAULT_FOLDER}/{capture.default_name(command)}")
    range_end = capture.parse_range_end(args.profiler_range) if args.profiler_range else None
    frequency = capture.parse_metrics_frequency(args.metrics_frequency) if args.metrics_frequency else None
    return CaptureOptions(output=output, trace=args.trace, range_end=range_end, delay=args.delay,
                          duration=args.duration, extra=tuple(args.nsys_arg), python=args.python,
                          gpu_metrics=bool(args.metrics) or frequency is not None, gpu_metrics_frequency=frequency)


def _validate_check_options(args: argparse.Namespace) -> str | None:
    """Stop on a bad --select or --format before a capture that can take minutes, not after it; the config
    file in use (None without one)."""
    registry, settings = check.check_setup(args)
    for rule in select_rules(registry, settings):
        effective_options(rule, settings)
    prepare(args, registry, settings)  # reads --baseline
    return settings.source


def preflight(command: list[str], options: CaptureOptions, location: NsysLocation, *,
              allow_debug: bool = False, environ: dict[str, str] | None = None) -> list[Problem]:
    """Every verdict before the capture, stops and warnings, in the order they are shown."""
    env = dict(os.environ if environ is None else environ)
    problems: list[Problem] = []
    debug = capture.debug_build_problem(command, env)
    if debug and allow_debug:
        problems.append(Problem(debug.message + " (--allow-debug: profiling it anyway)"))
    elif debug:
        problems.append(debug)
    if location.path is None:
        problems.append(Problem(*missing_parts(location), ExitCode.BAD_INPUT))
    else:
        note = off_path_note(location)
        if note:
            problems.append(Problem(note))
        broken = importer_problem(location.path, env)
        if broken:
            problems.append(Problem(broken[0], broken[1]))
    problems += capture.environment_problems(env, command)
    trace = capture.trace_problem(options.trace)
    if trace:
        problems.append(trace)
    if options.gpu_metrics and location.path is not None:
        problems += _metrics_problems(location.path)
    return problems


def _metrics_problems(nsys: Path) -> list[Problem]:
    """``--metrics``: a stop when the GPU's counters are out of reach (nsys would refuse the whole capture), a warning
    when no GPU here can be sampled."""
    from nsys_rules.commands.doctor import gpu_metrics_check

    verdict = gpu_metrics_check(nsys)
    if verdict.blocked:
        return [Problem(verdict.message, verdict.fix + "; or profile without --metrics", ExitCode.BAD_INPUT)]
    if verdict.level != "ok":
        return [Problem(verdict.message + " (--metrics: the capture may hold no GPU metrics)", verdict.fix)]
    return []


def _report_problems(problems: list[Problem], verdict: bool) -> ExitCode | None:
    """Print each problem (stderr); the exit code of the first stop, None when nothing stops."""
    stop = next((p.exit_code for p in problems if p.exit_code is not None), None)
    for problem in problems:
        kind = "stop" if problem.exit_code is not None else "warning"
        _say(f"{kind}: {problem.message}" + (f"\n  fix: {problem.fix}" if problem.fix else ""))
    if verdict:
        _say("preflight: ok" if stop is None else f"preflight: stops (exit {int(stop)})")
    return stop


def _guard_command_file(args: argparse.Namespace, options: CaptureOptions, config: str | None) -> None:
    """``--command-file`` obeys the rules of every output (:mod:`nsys_rules.outpaths`), checked before anything
    runs: never an input (the config, the baseline, the report this capture writes), an nsys export, a FIFO or
    device, or the path of another output."""
    inputs = [Path(p) for p in (config, getattr(args, "baseline", None)) if p]
    if "%" not in options.output:  # nsys expands %h/%p/%q{}: those names are only known once it ran
        inputs += [Path(options.output + suffix) for suffix in (".sqlite", ".nsys-rep", ".qdstrm")]
    guard_outputs({"--command-file": args.command_file, "--html": getattr(args, "html", None),
                   "--write-baseline": getattr(args, "write_baseline", None)}, inputs,
                  may_replace={"--write-baseline": getattr(args, "baseline", None)})


def _write_command_file(path: Path, options: CaptureOptions, dry_run: bool = False) -> None:
    # Atomic, like every output: a reader (nsys, another rank) sees the old flags or the new ones, and a
    # symlink at ``path`` is replaced, never written through to its target.
    write_atomic(path, capture.command_file_text(options), "the command file")
    reuse = f"nsys profile --command-file={shell_word(str(path))} -o {shell_word(options.output)} CMD"
    shown = terminal_safe(str(path), newlines=False)  # a newline in the name must not print a second line
    if dry_run:
        _say(f"--dry-run: nothing run; the one file written is the command file {shown} (reuse: {reuse})")
    else:
        _say(f"nsys flags written to {shown}; reuse: {reuse}")


def _capture_and_check(args: argparse.Namespace, nsys_cmd: list[str], options: CaptureOptions) -> int:
    output = options.output
    folder = os.path.dirname(output)
    if folder and "%" not in folder:
        os.makedirs(folder, exist_ok=True)
    pattern = capture.output_glob(output, os.environ, repeat=(options.range_end or "").startswith("repeat"))
    started = time.time() - 2  # file times can be coarser than the clock
    returncode, lines = _run_streaming(nsys_cmd)
    if options.python:
        _export_with_payloads(nsys_cmd[0], capture.written_files(pattern, ".nsys-rep", started))
    traces = capture.written_files(pattern, ".sqlite", started) or capture.written_files(pattern, ".nsys-rep", started)
    if not traces:
        return _no_trace(returncode, lines, output, capture.written_files(pattern, ".qdstrm", started))
    if returncode != 0:
        # nsys exits with the program's exit code; whatever it recorded up to the failure is still worth reading.
        _say(f"the profiled program failed: `nsys profile` exited with code {returncode}; its last lines:")
        _show(program_lines(lines))
        _say("nsys wrote a partial trace; checking it")
        check.run(_with_traces(args, traces))
        return int(ExitCode.INCOMPLETE)
    if traces[0].suffix != ".sqlite":
        _say(f"nsys wrote {traces[0]} but no SQLite export; checking the report (exported through nsys)")
    return int(check.run(_with_traces(args, traces)))


def _export_with_payloads(nsys: str, reports: list[Path]) -> None:
    """``--python``: each report exported to SQLite with its NVTX payloads (the Python frames live there)."""
    for report in reports:
        command = capture.export_command(nsys, report)
        _say(f"exporting: {shell_join(command)}")
        limit = export_time_limit(report)
        returncode, lines = _run_streaming(command, timeout=limit)
        if returncode == -signal.SIGKILL:
            _say(f"`nsys export` did not finish within {limit:.0f} s (stopped); the report is checked without its "
                 "Python frames")
        elif returncode != 0:
            _say(f"`nsys export` exited with code {returncode}; the report is checked without its Python frames")
            _show(lines[-TAIL_LINES:])


def _no_trace(returncode: int, lines: list[str], output: str, raw: list[Path]) -> int:
    """Nothing to check: the program failed before nsys recorded anything, or nsys could not make the report."""
    looked = f"{output}.sqlite"
    if raw:
        # A .qdstrm without a report: nsys recorded, then its importer failed (libdw missing, disk full...).
        _say(f"nsys recorded {raw[0]} but could not turn it into a report (no {looked}); nsys's last lines:")
        _show(lines[-TAIL_LINES:])
        _say("run `nsys-rules doctor` to see what this nsys lacks")
        return int(ExitCode.BAD_INPUT)
    if returncode != 0:
        _say(f"the profiled program failed: `nsys profile` exited with code {returncode}; its last lines:")
        _show(program_lines(lines))
        _say(f"no trace was written (looked for {looked})")
        return int(ExitCode.INCOMPLETE)
    _say(f"nsys finished but wrote no export (looked for {looked}); nsys's last lines:")
    _show(lines[-TAIL_LINES:])
    _say("run `nsys-rules doctor` to see what this nsys lacks")
    return int(ExitCode.BAD_INPUT)


def _with_traces(args: argparse.Namespace, paths: list[Path]) -> argparse.Namespace:
    # The capture just made is judged first: its validity verdict and each reason's fix go to stderr.
    return argparse.Namespace(**{**vars(args), "traces": [str(p) for p in paths], "announce_validity": True})


def _run_streaming(cmd: list[str], timeout: float | None = None) -> tuple[int, list[str]]:
    """Run ``cmd``, copying its output (stdout and stderr) to our stderr; its exit code and last lines.
    ``timeout``: seconds after which it is killed (its exit code then says SIGKILL)."""
    tail: deque[str] = deque(maxlen=4 * TAIL_LINES)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        raise InputError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    timer = None
    if timeout is not None:
        import threading

        timer = threading.Timer(timeout, proc.kill)
        timer.daemon = True
        timer.start()
    try:
        return _stream(proc, tail)
    finally:
        if timer is not None:
            timer.cancel()


def _stream(proc: "subprocess.Popen[bytes]", tail: deque[str]) -> tuple[int, list[str]]:
    assert proc.stdout is not None
    try:
        for raw in iter(proc.stdout.readline, b""):
            _echo(raw, tail)
        return proc.wait(), list(tail)
    except KeyboardInterrupt:
        # nsys got the same Ctrl-C: it stops the program and still writes the report, so wait for it.
        _say("interrupted; waiting for nsys to write what it has (Ctrl-C again to abandon it)")
        try:
            for raw in iter(proc.stdout.readline, b""):
                _echo(raw, tail)
            return proc.wait(), list(tail)
        except KeyboardInterrupt:
            proc.kill()
            raise


def _echo(raw: bytes, tail: deque[str]) -> None:
    line = raw.decode("utf-8", errors="replace")
    sys.stderr.write(line)
    sys.stderr.flush()
    tail.append(line.rstrip("\r\n").rsplit("\r", 1)[-1])  # a progress bar redraws with \r: keep its last state


#: Lines nsys itself prints around the program's output (progress, file names, notices).
_NSYS_LINE_STARTS = ("Collecting data", "Generating '", "Generated:", "Processing events", "Saving temporary",
                     "Capture range ", "WARNING: CPU ", "Importing", "Exporting")


def program_lines(lines: list[str]) -> list[str]:
    """The last output lines that are not nsys's own (its progress bars and file names)."""
    kept = [line for line in lines if not _is_nsys_line(line)]
    return kept[-TAIL_LINES:] or lines[-TAIL_LINES:]


def _is_nsys_line(line: str) -> bool:
    stripped = line.strip()
    return (not stripped or stripped.startswith(_NSYS_LINE_STARTS) or stripped.startswith("[") and "%]" in stripped
            or stripped.endswith((".nsys-rep", ".sqlite", ".qdstrm")) and " " not in stripped)


def _show(lines: list[str]) -> None:
    for line in lines:
        sys.stderr.write(terminal_safe(f"  | {line}") + "\n")
    sys.stderr.flush()


def _say(text: str) -> None:
    sys.stderr.write(terminal_safe(f"nsys-rules: {text}") + "\n")
    sys.stderr.flush()
