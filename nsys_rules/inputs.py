"""Turning command-line paths into open traces.

An nsys ``parquetdir``/``arrowdir`` export folder is one trace; other directories expand to the
exports inside them; ``.nsys-rep`` reports are exported with ``nsys export`` (to SQLite, or to
a parquetdir with ``--export-format parquetdir``) into a temporary folder, never beside the
user's file; suffixes claimed by a plugin loader go to that loader.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from nsys_rules.errors import InputError
from nsys_rules.loaders import EXPORT_FORMATS
from nsys_rules.loaders.arrowdir import ArrowDirExport, folder_kind
from nsys_rules.loaders.memory_limit import open_guard
from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.nsys_locate import locate_nsys, missing_message
from nsys_rules.nsys_run import export_time_limit, sigterm_unwinds
from nsys_rules.textsafe import shell_word
from nsys_rules.model.trace import Trace

TRACE_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


def expand_inputs(paths: list[str], extra_suffixes: tuple[str, ...] = ()) -> list[Path]:
    """Files and export folders as given; other folders replaced by the traces directly inside them (sorted)."""
    out: list[Path] = []
    suffixes = TRACE_SUFFIXES + tuple(extra_suffixes)
    for raw in paths:
        path = Path(raw)
        if folder_kind(path) is not None:
            out.append(path)  # a parquetdir/arrowdir export is one trace
        elif path.is_dir():
            found = sorted(p for p in path.iterdir() if (p.is_file() and p.suffix.lower() in suffixes)
                           or (p.is_dir() and folder_kind(p) is not None))
            if not found:
                raise InputError(f"{path}: folder holds no traces (*.sqlite, *.nsys-rep, *.parquetdir, *.arrowdir)")
            out.extend(found)
        else:
            out.append(path)
    return out


def open_trace(path: Path, loaders: Mapping[str, Callable[..., Any]] | None = None,
               export_format: str = "sqlite", max_memory: int | None = None) -> Trace:
    """Open one trace read-only; :class:`InputError` with one line when it cannot be used.

    ``export_format`` is the ``nsys export --type`` a ``.nsys-rep`` is exported to first.
    ``max_memory`` (``--max-memory`` in bytes; None: 80 % of the available memory) bounds what a folder
    export's reads while it opens (its metadata tables) may hold.
    """
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
        return _open_report(path, export_format)
    kind = folder_kind(path)
    if kind is not None:
        export = ArrowDirExport(path, kind)
        export.meter = open_guard(max_memory, str(path))
        return Trace(export, label=str(path))
    return Trace(SqliteExport(path), label=str(path))


def _open_report(path: Path, export_format: str = "sqlite") -> Trace:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    location = locate_nsys()
    if location.path is None:
        raise InputError(f"{path}: a .nsys-rep needs nsys to export it: {missing_message(location)}; or run "
                         f"`nsys export --type=sqlite {shell_word(path)}` where nsys is installed and pass the .sqlite")
    nsys = str(location.path)
    if export_format not in EXPORT_FORMATS:
        raise InputError(f"--export-format {export_format!r}: choose from {', '.join(EXPORT_FORMATS)}")
    folder = Path(tempfile.mkdtemp(prefix="nsys-rules-"))
    target = folder / (path.stem + "." + export_format)
    try:
        # Whatever ends the export (a failure, Ctrl-C, a damaged result), the folder goes with it.
        limit = export_time_limit(path)
        try:
            with sigterm_unwinds(cleanup=lambda: shutil.rmtree(folder, ignore_errors=True)):  # SIGTERM: no folder left
                proc = subprocess.run([nsys, "export", f"--type={export_format}", "--force-overwrite=true", "-o",
                                       str(target), str(path)], capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise InputError(f"{path}: `nsys export` did not finish within {limit:.0f} s (stopped); export the "
                             "report yourself and pass the .sqlite") from None
        except OSError as exc:
            raise InputError(f"{path}: `nsys export` failed ({exc})") from None
        if export_format != "sqlite" and not target.exists():
            # Where nsys puts a folder export when -o names one differently: the one folder it wrote.
            made = [p for p in folder.iterdir() if p.is_dir()]
            target = made[0] if len(made) == 1 else target
        if proc.returncode != 0 or not target.exists():
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise InputError(f"{path}: `nsys export` failed: {last[0]}")
        export = SqliteExport(target) if export_format == "sqlite" else ArrowDirExport(
            target, "parquet" if export_format == "parquetdir" else "arrow")
        trace = Trace(export, label=str(path))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    trace.cleanup_dir = folder
    return trace
