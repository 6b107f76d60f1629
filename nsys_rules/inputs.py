"""Turning command-line paths into open traces.

Directories expand to the exports inside them; ``.nsys-rep`` reports are exported with
``nsys export`` into a temporary folder (never beside the user's file); suffixes claimed
by a plugin loader go to that loader.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import InputError
from .loaders.sqlite import SqliteExport
from .textsafe import shell_word
from .trace import Trace

TRACE_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


def expand_inputs(paths: list[str], extra_suffixes: tuple[str, ...] = ()) -> list[Path]:
    """Files as given; folders replaced by the traces directly inside them (sorted)."""
    out: list[Path] = []
    suffixes = TRACE_SUFFIXES + tuple(extra_suffixes)
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
            if not found:
                raise InputError(f"{path}: folder holds no traces (*.sqlite, *.nsys-rep)")
            out.extend(found)
        else:
            out.append(path)
    return out


def open_trace(path: Path, loaders: Mapping[str, Callable[..., Any]] | None = None) -> Trace:
    """Open one trace read-only; :class:`InputError` with one line when it cannot be used."""
    suffix = path.suffix.lower()
    if loaders and suffix in loaders:
        try:
            trace = loaders[suffix](path)
        except InputError:
            raise
        except SystemExit as exc:
            raise InputError(f"{path}: the plugin loader for {suffix} called sys.exit({exc.code!r})") from None
        except Exception as exc:  # noqa: BLE001 - a plugin's bug on this file: say whose, one line
            raise InputError(f"{path}: the plugin loader for {suffix} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(trace, Trace):
            raise InputError(f"{path}: the loader for {suffix} returned {type(trace).__name__}, not a Trace")
        return trace
    if suffix in (".nsys-rep", ".qdrep"):
        return _open_report(path)
    return Trace(SqliteExport(path), label=str(path))


def _open_report(path: Path) -> Trace:
    nsys = shutil.which("nsys")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if nsys is None:
        raise InputError(f"{path}: .nsys-rep needs `nsys` on PATH to export it; run "
                         f"`nsys export --type=sqlite {shell_word(path)}` where nsys is installed and pass the .sqlite")
    folder = Path(tempfile.mkdtemp(prefix="nsys-rules-"))
    target = folder / (path.stem + ".sqlite")
    try:
        # Whatever ends the export (a failure, Ctrl-C, a damaged result), the folder goes with it.
        try:
            proc = subprocess.run([nsys, "export", "--type=sqlite", "--force-overwrite=true", "-o", str(target),
                                   str(path)], capture_output=True, text=True, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(f"{path}: `nsys export` failed ({exc})") from None
        if proc.returncode != 0 or not target.exists():
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise InputError(f"{path}: `nsys export` failed: {last[0]}")
        trace = Trace(SqliteExport(target), label=str(path))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    trace.cleanup_dir = folder
    return trace
