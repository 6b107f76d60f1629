"""Where the wall time of one ``nsys-rules`` run goes: a timeline of its phases, on stderr.

Usage: python benchmarks/timeline.py check TRACE [check flags...] >/dev/null

Runs the CLI in this process, exactly as ``nsys-rules ARGS`` would (the read-ahead during the
imports included), and prints one line when each phase starts and ends: the background reads of
the read-ahead (per table), the preload, the steady window (GPU activity table and step model),
the step budget, each rule, the final ranking. Each line has the wall seconds since start, the
process's CPU seconds (all threads), its minor page faults (every fresh page of a big temporary
is one: a million-row int64 array that is freed and allocated again costs ~2,000) and its
resident set, and the thread it ran in. ``benchmarks/profile_rules.py`` measures each stage on its
own instead (peaks per rule); this shows how the stages overlap in a real run.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import resource
import sys
import threading
import time
from types import ModuleType
from typing import Any, Callable

_T0 = time.perf_counter()
_CPU0 = time.process_time()

#: Functions of nsys_rules.engine wrapped once the engine is imported (the CLI imports it late).
ENGINE_PHASES = ("steady_state_window", "step_budget", "run_rule", "finalize")


def _rss_mb() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize() // 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # peak, where statm is missing


def log(message: str) -> None:
    """One timeline line on stderr."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    faults = usage.ru_minflt
    sys.stderr.write(f"{time.perf_counter() - _T0:7.3f} s  cpu {time.process_time() - _CPU0:6.3f} s  "
                     f"sys {usage.ru_stime:6.3f} s  "
                     f"faults {faults // 1000:5d}k  rss {_rss_mb():5d} MB  [{threading.current_thread().name}] "
                     f"{message}\n")


def _label(name: str, args: tuple[Any, ...]) -> str:
    if name == "run_rule" and args:
        return f"rule {getattr(args[0], 'name', args[0])}"
    if name == "_read" and len(args) > 2:
        return f"read-ahead {args[2]}"
    return name


def wrap(owner: Any, name: str) -> None:
    """Replace ``owner.name`` by a version that logs its start and end."""
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        label = _label(name, args)
        log(f"> {label}")
        try:
            return inner(*args, **kwargs)
        finally:
            log(f"< {label}")

    setattr(owner, name, timed)


class _EngineHook(importlib.abc.MetaPathFinder):
    """Wraps the engine's phases right after the CLI imports it (importing it here would move its imports)."""

    def find_spec(self, name: str, path: Any, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "nsys_rules.engine":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            for phase in ENGINE_PHASES:
                wrap(module, phase)
            wrap(module.Trace, "preload")
            log("engine imported")

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def main(argv: list[str]) -> int:
    """Run ``nsys-rules argv`` with the timeline on."""
    sys.meta_path.insert(0, _EngineHook())
    from nsys_rules.loaders import readahead

    wrap(readahead.ReadAhead, "_read")
    from nsys_rules import cli

    atexit.register(log, "exit")  # the CLI leaves with os._exit after running the atexit handlers
    log("start")
    try:
        return cli.main(argv)
    finally:
        log("main returned")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
