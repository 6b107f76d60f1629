"""Command-line entry point: ``nsys-rules <command>``.

Every error the user can cause ends as one line on stderr and a documented exit code
(2 usage/config, 3 unreadable input); ``--debug`` shows the traceback instead.

This module imports only the standard library at load time: the commands (pandas, pyarrow)
are imported inside :func:`main`, so a Ctrl-C while they load ends as "interrupted" (exit
130), not as a traceback from the import machinery. Only the module of the command that runs
is imported (the others are listed by name and help line), so ``doctor`` or ``schema`` never
load pandas, and ``check`` starts reading the trace before it does.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from typing import NoReturn, Sequence

from nsys_rules import __version__
from nsys_rules.errors import ExitCode, NsysRulesError

#: Subcommand modules of :mod:`nsys_rules.commands`, in help order. Each has add_parser(subparsers) and run(args).
COMMAND_MODULES = ("check", "diff", "stats", "profile", "doctor", "rules_cmd", "explain", "schema", "mcp_cmd")
#: Each command's name and help line, as its module's add_parser gives them (a test keeps them equal):
#: the top-level help lists every command without importing their modules.
COMMANDS = {
    "check": ("check", "run the rules on one or more traces"),
    "diff": ("diff", "compare runs per step: did the step get slower, how sure is that, and why"),
    "stats": ("stats", "nsys stats summary reports (same numbers as `nsys stats`)"),
    "profile": ("profile", "capture CMD with nsys (the standard flags), then check the export"),
    "doctor": ("doctor", "can nsys profile here? where it is, its version, `nsys status -e` explained, the GPU"),
    "rules_cmd": ("rules", "list the registered rules"),
    "explain": ("explain", "show a rule's documentation and options"),
    "schema": ("schema", "print the JSON Schema of the JSON report"),
    "mcp_cmd": ("mcp", "serve check, diff, verify and more to coding agents over MCP (stdio)"),
}
#: Longest error line printed; a value from the command line or a file can be any length.
MAX_ERROR_LINE = 1000

EXIT_CODES = """exit codes:
  0  nothing at or above --fail-on      1  findings at or above --fail-on
  2  usage or config error              3  input unreadable or not an nsys export
  4  incomplete run (a rule or plugin failed)"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, exit 2: bots read the exit code, people read the line.
        self.exit(ExitCode.USAGE, f"nsys-rules: error: {message} (see `nsys-rules {self.prog.split()[-1]} --help`)\n"
                  if " " in self.prog else f"nsys-rules: error: {message} (see `nsys-rules --help`)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand; with ``only`` (a command name), only that command's
    module is imported and its flags defined, the others are their name and help line."""
    parser = _Parser(prog="nsys-rules", description="Rules over NVIDIA Nsight Systems SQLite exports.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"nsys-rules {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    import importlib

    for module in COMMAND_MODULES:
        name, help_line = COMMANDS[module]
        if only is None or only == name:
            importlib.import_module(f".commands.{module}", __package__).add_parser(sub)
        else:
            sub.add_parser(name, help=help_line)
    return parser


def command_of(args: Sequence[str]) -> str | None:
    """The command ``args`` run: the first word that is not an option (the top level's options take no
    value); None when there is none, or it is no command (argparse then says so)."""
    names = {name for name, _ in COMMANDS.values()}
    for arg in args:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def console() -> None:
    """The console script: :func:`main`, then exit with its code.

    Once the run is over (its output written, or its "interrupted" line), Ctrl-C is ignored: the
    interpreter's shutdown puts the default SIGINT action back, and an interrupt landing there
    would end the process by the signal instead of the documented exit code.
    """
    from nsys_rules.textsafe import escape_unwritable

    escape_unwritable(sys.stdout, sys.stderr)
    code = main(own_process=True)
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code == 130:
        # The interpreter also ends by the signal when the interrupt landed in code that an
        # extension ran while importing: the one line is written and the run is over, so leave now.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        os._exit(130)
    _leave(code)


def _leave(code: int) -> None:
    """Exit with ``code``, skipping the interpreter's teardown when nothing needs it.

    Tearing down frees every module and a big trace's frames one by one (~0.08 s after a check
    of a 1M-kernel trace) for nothing: the system takes the memory back at once. So when no
    thread but daemon ones is alive and no profiler or tracer watches, the exit handlers run
    (``atexit``: temporary folders, logging, plugins' handlers) and both streams flush, the
    process leaves with ``os._exit``; otherwise (or when a flush fails: the reader left the
    pipe) it exits through ``sys.exit`` as before.

    Threads left running never hold the exit: the report is written, so a thread a plugin rule started and
    never ended (``isolation`` names it on stderr) is not waited for; ``sys.exit`` would join it forever.
    """
    import atexit
    import threading

    # A profiler or tracer around the run (cProfile, coverage) writes its results after the code returns.
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    stray = any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate())
    if watched and not stray:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if not stray:
                sys.exit(code)
    os._exit(code)


def main(argv: Sequence[str] | None = None, own_process: bool = False) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code.

    ``own_process``: the caller is the console script, so the run may end the process itself when a rule ignores
    its time limit (:mod:`nsys_rules.deadline`); a library caller keeps its process.
    """
    previous = sys.unraisablehook
    sys.unraisablehook = _redeliver_interrupt
    try:
        return _run(argv, own_process)
    finally:
        sys.unraisablehook = previous


def _run(argv: Sequence[str] | None, own_process: bool = False) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `--debug` anywhere but after `--`, where it belongs to the program that `profile` runs.
    ours = args_list[: args_list.index("--")] if "--" in args_list else args_list
    debug = "--debug" in ours
    if debug:
        args_list.remove("--debug")
    try:
        _take_over_interrupts()  # first, inside the try: from here a Ctrl-C is the KeyboardInterrupt caught below
        from nsys_rules.malloc_tune import collector_paused, tune_malloc

        tune_malloc()  # big traces: freed column buffers go back to the system (see nsys_rules/malloc_tune.py)
        parser = build_parser(command_of(args_list) or "")
        if sys.stdout is None:  # started with stdout closed (`>&-`): output could only be lost
            raise OSError(errno.EBADF, "standard output is closed")
        args = parser.parse_args(args_list)
        if not hasattr(args, "run"):  # a command command_of did not see (after `--`): parse with every one
            args = build_parser().parse_args(args_list)
        args.own_process = own_process
        # The command (its imports and the analysis) without the cyclic collector. Inside this try, so that a
        # Ctrl-C landing while the collector is put back is the one "interrupted" line like any other.
        import contextlib

        from nsys_rules.containment import report_output

        # stdout is the report's alone: plugin code's prints, at import too, go to stderr (containment). The MCP
        # server's stdout is its protocol channel, which it guards itself (its worker points fd 1 at stderr).
        held = contextlib.nullcontext() if getattr(args, "command", None) == "mcp" else report_output(own_process)
        with collector_paused(), held:
            return int(args.run(args))
    except NsysRulesError as exc:
        if debug:
            traceback.print_exc()
        from nsys_rules.textsafe import ci_log_safe

        # A file name or a name from the trace in the line: no CI workflow command out of it.
        sys.stderr.write(ci_log_safe(_fit_error(f"nsys-rules: {one_line(str(exc))}")) + "\n")
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
            return _internal_error(exc, debug)
        _silence_stdout()
        sys.stderr.write(f"nsys-rules: cannot write the output ({exc.strerror or exc}); nothing more written\n")
        return int(ExitCode.INCOMPLETE)
    except Exception as exc:  # noqa: BLE001 - a bug must still end in one line, not a traceback
        if _interrupted(exc):  # Ctrl-C inside a class body or import, wrapped by Python (``__set_name__``)
            sys.stderr.write("nsys-rules: interrupted\n")
            return 130
        return _internal_error(exc, debug)


def _take_over_interrupts() -> None:
    """Ctrl-C raises KeyboardInterrupt again, where ``nsys_rules.__main__`` set its start-up handler.

    That handler ends the process at once (nothing to clean up before the run); from here on an
    interrupt must reach the ``except KeyboardInterrupt`` of :func:`_run`, which removes what the
    run made (temporary exports, partial outputs). A handler anyone else set (an embedding
    program, a test runner) is left alone.
    """
    import signal

    current = signal.getsignal(signal.SIGINT)
    if getattr(current, "__qualname__", "") == "_interrupted_at_start":
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _internal_error(exc: BaseException, debug: bool) -> int:
    """A bug: one line (the traceback too with ``--debug``), exit 4."""
    if debug:
        traceback.print_exc()
    from nsys_rules.textsafe import ci_log_safe

    sys.stderr.write(ci_log_safe(f"nsys-rules: internal error: {type(exc).__name__}: {one_line(str(exc))} "
                                 "(rerun with --debug and report it)") + "\n")
    return int(ExitCode.INCOMPLETE)


def _fit_error(line: str) -> str:
    """An error line wrapped to the terminal (``COLUMNS``, or stderr's width), words kept whole.

    Piped or logged, it stays one line for scripts to grep; on a terminal nothing runs past its edge.
    """
    env = os.environ.get("COLUMNS", "").strip()
    width = int(env) if env.isdigit() else 0
    if not width and sys.stderr is not None and sys.stderr.isatty():
        import shutil

        width = shutil.get_terminal_size().columns
    if width < 40 or len(line) <= width:
        return line
    import textwrap

    return "\n".join(textwrap.wrap(line, width, subsequent_indent="  ", break_long_words=False,
                                    break_on_hyphens=False))


def _redeliver_interrupt(unraisable: "sys.UnraisableHookArgs") -> None:
    """A Ctrl-C that Python could not raise (it landed in a weakref callback of the import system) is
    delivered again to the main thread, where it ends the run as any Ctrl-C; other cases as Python does."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import _thread

        try:
            _thread.interrupt_main()
        except KeyboardInterrupt:
            # The redelivered interrupt ran here, still inside the hook, where Python would print and drop it:
            # end as every Ctrl-C does (the one line, exit 130), without the teardown.
            try:
                os.write(2, b"nsys-rules: interrupted\n")
            finally:
                os._exit(130)
        return
    sys.__unraisablehook__(unraisable)


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` wraps a Ctrl-C (its cause or context chain holds a KeyboardInterrupt)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _visible(ch: str) -> str:
    # A path's non-UTF-8 byte (held as U+DC80-U+DCFF) is shown as the byte, as the outputs show it.
    return f"\\x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else repr(ch)[1:-1]


def one_line(text: str) -> str:
    """``text`` with control characters (newlines from SQLite messages, from the file) made visible, and cut
    to :data:`MAX_ERROR_LINE` characters."""
    line = "".join(ch if ch.isprintable() else _visible(ch) for ch in text)
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
