"""The worker process that does the tools' work, and the server's handle on it.

Why a process, not the server's own thread: a tool call must not hang past its time limit, and
Python cannot stop a thread stuck in a rule, in pandas or in a C extension reading a hostile
file. The worker is started once (spawned: it imports the engine and the plugins itself) and serves
call after call, so its imports and kept reports are paid once, not per call; at the time limit,
or when the agent cancels the call, the server kills it and the next call starts a fresh one. A
crash in it (a segfault on a damaged file, the kernel's out-of-memory killer) ends that call
with an error, never the server.

Plugin and rule output never reaches the protocol: the worker points its file descriptor 1 and
``sys.stdout`` at stderr before it imports anything of the engine; the server's stdout is the
MCP channel and the worker holds no descriptor of it but an inherited fd 1 it replaces at once.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from nsys_rules.errors import ExitCode
from nsys_rules.mcp_server.work import ServerConfig, Work

#: Exit-code meanings, as the CLI documents them.
MEANINGS = {ExitCode.USAGE: "usage error", ExitCode.BAD_INPUT: "input unreadable or not an nsys export",
            ExitCode.INCOMPLETE: "incomplete run (a rule, a plugin or the analysis failed)"}


#: Seconds a fresh worker may take to import the engine and the plugins before the call is given up.
START_LIMIT_S = 120.0


class ToolFailure(Exception):
    """A tool call that ended in an error: its exit code (the CLI's meaning) and one line."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = int(exit_code)
        self.message = message


def _tools() -> dict[str, Callable[[Work, dict[str, Any]], dict[str, Any]]]:
    from nsys_rules.mcp_server.capture_tool import profile_tool
    from nsys_rules.mcp_server.verify import diff_tool, verify_tool
    from nsys_rules.mcp_server.work import check_tool, explain_tool, finding_tool, rule_pages, stats_tool

    return {"check": check_tool, "explain": explain_tool, "finding": finding_tool, "diff": diff_tool,
            "verify": verify_tool, "stats": stats_tool, "profile": profile_tool, "rule_pages": rule_pages}


def answer(work: Work, tools: dict[str, Callable[[Work, dict[str, Any]], dict[str, Any]]], tool: str,
           arguments: dict[str, Any]) -> tuple[str, Any]:
    """One call's reply: ``("ok", result)`` or ``("error", (exit_code, line))``; never raises."""
    from nsys_rules.cli import one_line
    from nsys_rules.errors import NsysRulesError

    try:
        return "ok", tools[tool](work, arguments)
    except NsysRulesError as exc:
        return "error", (int(exc.exit_code), one_line(str(exc)))
    except MemoryError:
        return "error", (int(ExitCode.BAD_INPUT), "out of memory; narrow the call with filter_time or rules")
    except RecursionError as exc:
        return "error", (int(ExitCode.BAD_INPUT), f"the input is nested too deeply to read: {one_line(str(exc))}")
    except Exception as exc:  # noqa: BLE001 - a bug must end as one line, never a traceback on the protocol
        return "error", (int(ExitCode.INCOMPLETE), f"internal error: {type(exc).__name__}: {one_line(str(exc))}")


def worker_main(conn: Connection, config: ServerConfig) -> None:
    """The worker's loop: receive ``(call_id, tool, arguments)``, send ``(call_id, status, payload)``."""
    os.dup2(2, 1)  # first: nothing this process or its children print can reach the protocol's channel
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the server's to handle
    import gc

    from nsys_rules.malloc_tune import tune_malloc

    tune_malloc()
    try:
        work = Work(config)
        tools = _tools()
        work.registry  # noqa: B018 - the plugins load before "ready": their import is no call's time
    except Exception as exc:  # noqa: BLE001 - a bad --root or a broken install: every call says it
        from nsys_rules.cli import one_line
        from nsys_rules.errors import NsysRulesError

        code = int(exc.exit_code) if isinstance(exc, NsysRulesError) else int(ExitCode.INCOMPLETE)
        conn.send((0, "failed", (code, one_line(str(exc)))))
        return
    import nsys_rules.engine  # noqa: F401 - the engine's imports (pandas, the loaders) before "ready", not in a call

    conn.send((0, "ready", None))
    while True:
        try:
            call_id, tool, arguments = conn.recv()
        except (EOFError, OSError):  # the server went away
            return
        status, payload = answer(work, tools, tool, arguments)
        try:
            conn.send((call_id, status, payload))
        except (OSError, ValueError):
            return
        gc.collect()  # the engine's frames hold cycles; a long-lived worker frees them between calls


class WorkerHandle:
    """The server's side: starts the worker when needed, sends a call, waits within the time limit."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._proc: Any = None
        self._conn: Connection | None = None
        self._ids = itertools.count(1)
        self._ready = False

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs an event loop and threads
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=worker_main, args=(child, self.config), daemon=True, name="nsys-rules-mcp-worker")
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self._ready = False

    def stop(self) -> None:
        """Kill the worker (the next call starts a fresh one)."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(5)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The tool's result; :class:`ToolFailure` for its error, the time limit, or the worker's end."""
        import anyio

        if self._proc is None or not self._proc.is_alive():
            self.stop()
            self._start()
        assert self._conn is not None
        call_id = next(self._ids)
        conn = self._conn
        answered = False
        try:
            if not self._ready:
                await self._wait_ready(conn)
            conn.send((call_id, tool, arguments))
            deadline = time.monotonic() + self.config.call_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ToolFailure(ExitCode.INCOMPLETE, f"time limit: {tool} ran past {self.config.call_timeout:g} s "
                                      "and was stopped (start the server with a larger --timeout, or narrow the call "
                                      "with filter_time or rules)")
                if await anyio.to_thread.run_sync(conn.poll, min(0.25, left)):
                    try:
                        reply_id, status, payload = conn.recv()
                    except (EOFError, OSError):
                        raise ToolFailure(ExitCode.INCOMPLETE, self._ended(tool)) from None
                    if reply_id != call_id:  # a late reply to a call given up on
                        continue
                    answered = True
                    if status == "ok":
                        return payload
                    raise ToolFailure(*payload)
        finally:
            if not answered:
                # Timed out, cancelled by the client, or the worker died: its state is unknown, so it goes, and
                # the next call starts a fresh one.
                self.stop()

    async def _wait_ready(self, conn: Connection) -> None:
        """Wait for a fresh worker's imports (not counted in the call's time limit), within :data:`START_LIMIT_S`."""
        import anyio

        deadline = time.monotonic() + START_LIMIT_S
        while time.monotonic() < deadline:
            if await anyio.to_thread.run_sync(conn.poll, 0.25):
                try:
                    _, status, payload = conn.recv()
                except (EOFError, OSError):
                    raise ToolFailure(ExitCode.INCOMPLETE, self._ended("its start")) from None
                if status != "ready":  # it could not start (a broken install): every call says why
                    raise ToolFailure(*payload)
                self._ready = True
                return
        raise ToolFailure(ExitCode.INCOMPLETE, f"the analysis process did not start within {START_LIMIT_S:g} s")

    def _ended(self, tool: str) -> str:
        proc = self._proc
        if proc is not None:
            proc.join(2)
        code = None if proc is None else proc.exitcode
        self.stop()
        how = (f"was killed by signal {-code}" + (" (out of memory?)" if code == -signal.SIGKILL else "")
               if code is not None and code < 0 else f"ended with exit code {code}")
        return f"the analysis process {how} during {tool}; the next call starts a fresh one"
