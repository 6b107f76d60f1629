"""The capture half of the playbook, as plain functions: the preflight and the standard nsys command.

``nsys-rules profile`` (``commands/profile.py``) strings these together; they hold no I/O beyond
looking for the files nsys wrote, so each verdict is testable on its own. Half of what ``check``
reports on a badly made trace (debug build, graph replays traced as one launch, launch blocking,
allocator churn from a disabled cache) is decided here, before the trace exists.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from nsys_rules.errors import ExitCode, UsageError
from nsys_rules.units import whole_number
from nsys_rules.model.commands import command_evidence

#: The flags every capture gets: reuse the file name, trace graph replays kernel by kernel, write SQLite.
STANDARD_FLAGS = ("--force-overwrite=true", "--cuda-graph-trace=node", "--export=sqlite")
DEFAULT_TRACE = "cuda,nvtx"
#: ``--python``: Python samples every millisecond and the Python stack at each synchronizing or copying CUDA call.
#: nsys takes a Python backtrace only at a call it takes a CUDA backtrace of, and CUDA backtraces only with CPU
#: sampling on (threshold 0: every sync and copy, not only those over the default 80 us; kernel launches are left
#: out, a backtrace each would slow the host most). With sampling on nsys traces context switches too, whatever
#: --cpuctxsw says. The report is then exported with ``--include-blobs=true`` (:func:`export_command`): without it
#: nsys writes the samples' times but not one frame.
PYTHON_FLAGS = ("--sample=process-tree", "--python-sampling=true", "--python-backtrace=cuda",
                "--cudabacktrace=sync:0,memory:0")
DEFAULT_FOLDER = "target/profiling"

_RANGE_END = re.compile(r"(stop|stop-shutdown|repeat(-shutdown)?:[1-9][0-9]*)")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# nsys's output name patterns: %h host, %p pid, %n sequence number, %q{VAR} environment variable.
_NAME_PATTERN = re.compile(r"%q\{[^}]*\}|%[hpn]")
_REPORT_SUFFIXES = (".nsys-rep", ".sqlite", ".qdrep", ".qdstrm")


@dataclass(frozen=True)
class CaptureOptions:
    """What goes into ``nsys profile`` besides the program."""

    output: str
    trace: str = DEFAULT_TRACE
    range_end: str | None = None      # set: capture only inside cudaProfilerStart/Stop
    delay: int | None = None
    duration: int | None = None
    extra: tuple[str, ...] = ()
    gpu_metrics: bool = False  # sample DRAM, SM, tensor and PCIe activity (--gpu-metrics-devices=all)
    gpu_metrics_frequency: int | None = None  # Hz (nsys: 10..200000, default 10000)
    python: bool = False               # set: Python samples and backtraces, exported afterwards with the payloads


@dataclass(frozen=True)
class Problem:
    """One preflight verdict: ``exit_code`` None for a warning, else the run stops with it."""

    message: str
    fix: str = ""
    exit_code: ExitCode | None = None


#: The sampling frequencies nsys accepts for GPU metrics (Hz).
METRICS_FREQUENCY = (10, 200_000)


def parse_metrics_frequency(value: str) -> int:
    """``--metrics-frequency`` HZ: a whole number nsys accepts (10..200000)."""
    try:
        hz = whole_number(value)
    except ValueError:
        hz = -1
    low, high = METRICS_FREQUENCY
    if not low <= hz <= high:
        raise UsageError(f"--metrics-frequency takes a whole number of Hz from {low} to {high}, not {value!r}")
    return hz


def parse_range_end(value: str) -> str:
    """``--profiler-range`` END: ``stop``, ``stop-shutdown``, ``repeat:N`` or ``repeat-shutdown:N``."""
    if not _RANGE_END.fullmatch(value):
        raise UsageError(f"--profiler-range takes stop or repeat:N, not {value!r} "
                         "(put the program after `--`: profile --profiler-range -- CMD)")
    return value


def normalize_output(output: str) -> str:
    """The report name without the suffix nsys adds itself (``x.nsys-rep`` and ``x`` are the same report)."""
    for suffix in _REPORT_SUFFIXES:
        if output.endswith(suffix) and len(output) > len(suffix):
            return output[: -len(suffix)]
    return output


def nsys_flags(options: CaptureOptions, long_form: bool = False) -> list[str]:
    """The ``nsys profile`` flags, ``-o`` last. ``long_form``: ``--capture-range=...`` for command files."""
    standard = [f for f in STANDARD_FLAGS if f != "--export=sqlite"] if options.python else list(STANDARD_FLAGS)
    flags = [*standard, f"--trace={options.trace}"]
    if options.python:
        flags += PYTHON_FLAGS
    if options.range_end:
        flags += ["--capture-range=cudaProfilerApi"] if long_form else ["-c", "cudaProfilerApi"]
        flags.append(f"--capture-range-end={options.range_end}")
    if options.delay is not None:
        flags.append(f"--delay={options.delay}")
    if options.duration is not None:
        flags.append(f"--duration={options.duration}")
    if options.gpu_metrics or options.gpu_metrics_frequency is not None:
        flags.append("--gpu-metrics-devices=all")
        if options.gpu_metrics_frequency is not None:
            flags.append(f"--gpu-metrics-frequency={options.gpu_metrics_frequency}")
    flags += options.extra
    return flags if long_form else [*flags, "-o", options.output]


def nsys_command(nsys: str, options: CaptureOptions, command: Sequence[str]) -> list[str]:
    """The whole capture command as an argument list (never through a shell)."""
    return [nsys, "profile", *nsys_flags(options), *command]


def export_command(nsys: str, report: str | Path) -> list[str]:
    """The SQLite export of ``report`` (a ``.nsys-rep``) beside it, NVTX payloads (the Python frames) included."""
    report = Path(report)
    return [nsys, "export", "--type=sqlite", "--include-blobs=true", "--force-overwrite=true", "-o",
            str(report.with_suffix(".sqlite")), str(report)]


def command_file_text(options: CaptureOptions) -> str:
    """An nsys ``--command-file``: one flag a line; no ``-o``, so one file serves every program."""
    flags = nsys_flags(options, long_form=True)
    spaced = [f for f in flags if any(ch.isspace() for ch in f)]
    if spaced:
        raise UsageError(f"a command file cannot hold a flag with spaces: {spaced[0]!r}")
    return "".join(f + "\n" for f in flags)


def program_tokens(command: Sequence[str]) -> list[str]:
    """``command`` without a leading ``env`` and ``NAME=value`` assignments."""
    tokens = list(command)
    if tokens and Path(tokens[0]).name == "env":
        tokens = tokens[1:]
    while tokens and _ASSIGNMENT.match(tokens[0]):
        tokens = tokens[1:]
    return tokens


def default_name(command: Sequence[str]) -> str:
    """A report name from the program: the script, the cargo --bin/--example, the -m module or the binary."""
    tokens = program_tokens(command)
    if not tokens:
        return "profile"
    name = Path(tokens[0]).name
    scripts = [t for t in tokens if t.endswith(".py") and not t.startswith("-")]
    if scripts:
        name = Path(scripts[0]).stem
    elif name == "cargo":
        own = _cargo_args(tokens[1:])
        name = _flag_value(own, ("--bin", "--example")) or "cargo"
    elif "-m" in tokens[:-1]:
        name = tokens[tokens.index("-m") + 1].rsplit(".", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-") or "profile"


def _cargo_args(rest: Sequence[str]) -> list[str]:
    # cargo's own arguments end at `--`; what follows belongs to the program (`cargo run -- -r` is debug).
    rest = list(rest)
    return rest[: rest.index("--")] if "--" in rest else rest


def _flag_value(args: Sequence[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            return args[i + 1]
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def debug_build_problem(command: Sequence[str], environ: Mapping[str, str]) -> Problem | None:
    """The stop for a debug build, with the release command.

    The debug-build rule's own reading of a command line decides (``cargo run`` without ``-r``, a
    ``target/debug/`` binary, a Debug build folder, a debug interpreter, a sanitizer), so the
    preflight stops exactly the captures that rule would flag afterwards.
    """
    evidence = command_evidence(tuple(command), environ)
    if evidence is None:
        return None
    build = f"build it with `{evidence.build_step}`, then " if evidence.build_step else ""
    return Problem(f"{evidence.reason}: kernels and host code run many times slower than in the release build, "
                   "so the trace misleads (the debug-build rule would flag it)",
                   f"{build}profile the release build: nsys-rules profile -- {evidence.release_command} "
                   "(or pass --allow-debug to profile this build on purpose)", ExitCode.USAGE)


#: Environment variables that change what the trace shows, with why and the rule that would flag it.
_ENV_HAZARDS = {
    "CUDA_LAUNCH_BLOCKING": "every kernel launch waits for the kernel to finish, so the trace loses all launch "
                            "overlap (the launch-blocking rule would flag it)",
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "PyTorch's caching allocator is off: every tensor becomes a cudaMalloc/cudaFree "
                                      "pair (the alloc-churn rule would flag it)",
}


def environment_problems(environ: Mapping[str, str], command: Sequence[str] = ()) -> list[Problem]:
    """Warnings for variables set in the environment or as ``VAR=value`` before the program."""
    assigned = dict(environ)
    tokens = list(command)
    if tokens and Path(tokens[0]).name == "env":
        tokens = tokens[1:]
    for token in tokens:
        if not _ASSIGNMENT.match(token):
            break
        key, value = token.split("=", 1)
        assigned[key] = value
    return [Problem(f"{name}={assigned[name]} is set: {why}", f"unset {name} for the capture")
            for name, why in _ENV_HAZARDS.items() if assigned.get(name, "") not in ("", "0")]


def trace_problem(trace: str) -> Problem | None:
    """A warning when --trace leaves out CUDA, which nearly every rule reads."""
    if "cuda" in {t.strip() for t in trace.split(",")}:
        return None
    return Problem(f"--trace={trace} leaves out cuda: most rules will be skipped for lack of kernels and API calls",
                   f"--trace=cuda,{trace}")


def output_glob(output: str, environ: Mapping[str, str] | None = None, repeat: bool = False) -> str:
    """A glob for the files nsys makes of ``output`` (without the suffix).

    ``%q{VAR}`` becomes the variable's value when it is set here (nsys inherits this environment, and
    under mpirun or torchrun each rank's own value keeps ranks from picking up each other's reports);
    ``%h``, ``%p``, ``%n`` and unset variables become wildcards. ``repeat``: nsys numbers the reports of
    a ``repeat:N`` capture, so anything may follow the name.
    """
    env = {} if environ is None else environ
    output = output.replace("%%", "\0")
    pieces = []
    last = 0
    for match in _NAME_PATTERN.finditer(output):
        pieces.append(glob.escape(output[last:match.start()]))
        variable = match.group()[3:-1] if match.group().startswith("%q") else None
        pieces.append(glob.escape(env[variable]) if variable and env.get(variable) else "*")
        last = match.end()
    pieces.append(glob.escape(output[last:]))
    return "".join(pieces).replace("\0", "%") + ("*" if repeat else "")


def written_files(pattern: str, suffix: str, since: float) -> list[Path]:
    """Files matching ``pattern`` (an :func:`output_glob`) + ``suffix``, changed at or after ``since``."""
    found = []
    for name in glob.glob(pattern + suffix):
        try:
            if os.path.getmtime(name) >= since:
                found.append(Path(name))
        except OSError:
            continue
    return sorted(found)
