"""Exceptions that map to the documented exit codes.

The CLI catches these and prints one line; anything else that escapes is a bug.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of every ``nsys-rules`` command."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    BAD_INPUT = 3
    INCOMPLETE = 4


class NsysRulesError(Exception):
    """Base of the errors the CLI turns into one line and an exit code."""

    exit_code: ExitCode = ExitCode.USAGE


class UsageError(NsysRulesError):
    """Bad flags, bad config, unknown rule or option: exit 2."""

    exit_code = ExitCode.USAGE


class InputError(NsysRulesError):
    """The input cannot be read as an nsys export: exit 3."""

    exit_code = ExitCode.BAD_INPUT


class PluginError(NsysRulesError):
    """Plugin code (a formatter, a loader) failed where the run cannot go on without it: exit 4."""

    exit_code = ExitCode.INCOMPLETE


class MissingData(Exception):
    """Raised inside a rule when the trace lacks what the rule needs.

    The engine records the rule under ``skipped`` with ``reason`` and ``fix``; it is
    not an error of the run.
    """

    def __init__(self, reason: str, fix: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix
