"""Helpers shared by the built-in rules (numbers and commands, no judgement)."""

from __future__ import annotations

from pathlib import Path

from nsys_rules.textsafe import shell_word
from nsys_rules.trace import Trace


def recapture_command(trace: Trace, flags: str = "--cuda-graph-trace=node", command: str | None = None) -> str:
    """The standard nsys capture of the same program, with ``flags`` added.

    Uses ``command`` when given (e.g. the release build of the profiled program; every word from the
    trace in it already quoted with :func:`~nsys_rules.textsafe.shell_word`), else the profiled
    command line recorded in the export; a placeholder when it is not recorded.
    """
    command = command or trace.capture.command_line or "<your program and its arguments>"
    name = Path(trace.label).stem or "report"
    return (f"nsys profile --force-overwrite=true {flags} --export=sqlite "
            f"-o {shell_word(name)} {command}").replace("  ", " ")


def pct(part: float, whole: float) -> float:
    """Percent, 0 when ``whole`` is 0."""
    return 100.0 * part / whole if whole else 0.0
