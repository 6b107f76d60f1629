"""Command-line entry point: ``nsys-rules <command>``.

Every error the user can cause ends as one line on stderr and a documented exit code
(2 usage/config, 3 unreadable input); ``--debug`` shows the traceback instead.

This module imports only the standard library at load time: the commands (pandas, pyarrow)
are imported inside :func:`main`, so a Ctrl-C while they load ends as "interrupted" (exit
130), not as a traceback from the import machinery.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from typing import Sequence

from . import __version__
from .errors import ExitCode, NsysRulesError

#: Subcommand modules of :mod:`nsys_rules.commands`, in help order. Each has add_parser(subparsers) and run(args).
COMMAND_MODULES = ("check", "diff", "stats", "profile", "doctor", "rules_cmd", "explain", "schema")
#: Longest error line printed; a value from the command line or a file can be any length.
MAX_ERROR_LINE = 1000

EXIT_CODES = """exit codes:
  0  nothing at or above --fail-on      1  findings at or above --fail-on
  2  usage or config error              3  input unreadable or not an nsys export
  4  incomplete run (a rule or plugin failed)"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line, exit 2: bots read the exit code, people read the line.
        self.exit(ExitCode.USAGE, f"nsys-rules: error: {message} (see `nsys-rules {self.prog.split()[-1]} --help`)\n"
                  if " " in self.prog else f"nsys-rules: error: {message} (see `nsys-rules --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = _Parser(prog="nsys-rules", description="Rules over NVIDIA Nsight Systems SQLite exports.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"nsys-rules {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `--debug` anywhere but after `--`, where it belongs to the program that `profile` runs.
    ours = args_list[: args_list.index("--")] if "--" in args_list else args_list
    debug = "--debug" in ours
    if debug:
        args_list.remove("--debug")
    try:
        from .malloc_tune import tune_malloc

        tune_malloc()  # big traces: freed column buffers go back to the system (see nsys_rules/malloc_tune.py)
        parser = build_parser()
        if sys.stdout is None:  # started with stdout closed (`>&-`): output could only be lost
            raise OSError(errno.EBADF, "standard output is closed")
        args = parser.parse_args(args_list)
        return int(args.run(args))
    except NsysRulesError as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"nsys-rules: {one_line(str(exc))}\n")
        return int(exc.exit_code)
    except MemoryError:
        sys.stderr.write("nsys-rules: out of memory; narrow the run with --filter-time or --select\n")
        return int(ExitCode.BAD_INPUT)
    except KeyboardInterrupt:
        sys.stderr.write("nsys-rules: interrupted\n")
        _interrupt_handled()
        return 130
    except BrokenPipeError:
        _silence_stdout()  # the reader left (`| head`); no second error at exit
        return 0
    except OSError as exc:
        if sys.stdout is not None and exc.errno not in _OUTPUT_ERRNOS:
            if debug:
                traceback.print_exc()
            sys.stderr.write(f"nsys-rules: internal error: {type(exc).__name__}: {one_line(str(exc))} "
                             "(rerun with --debug and report it)\n")
            return int(ExitCode.INCOMPLETE)
        _silence_stdout()
        sys.stderr.write(f"nsys-rules: cannot write the output ({exc.strerror or exc}); nothing more written\n")
        return int(ExitCode.INCOMPLETE)
    except Exception as exc:  # noqa: BLE001 - a bug must still end in one line, not a traceback
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"nsys-rules: internal error: {type(exc).__name__}: {one_line(str(exc))} "
                         "(rerun with --debug and report it)\n")
        return int(ExitCode.INCOMPLETE)


def one_line(text: str) -> str:
    """``text`` with control characters (newlines from SQLite messages, from the file) made visible, and cut
    to :data:`MAX_ERROR_LINE` characters."""
    line = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return line if len(line) <= MAX_ERROR_LINE else f"{line[:MAX_ERROR_LINE]}... ({len(line):,} characters)"


#: errno values that mean "stdout cannot take the output" (disk full, closed or bad descriptor).
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EBADF, errno.EIO, errno.EPIPE, errno.EDQUOT, errno.EFBIG}


def _interrupt_handled() -> None:
    """Tell CPython the Ctrl-C was handled, so the process ends with exit code 130.

    An interrupt that passes through ``exec()`` of a source string (dataclasses build their
    methods that way, so any import can be in one) is recorded by CPython 3.10/3.11 as unhandled
    even when caught, and the interpreter then ends the process by SIGINT after our exit code.
    """
    import ctypes

    try:
        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (ValueError, AttributeError):  # not exported (other interpreters, newer CPython): nothing to reset
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so Python's exit-time flush cannot fail a second time."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
