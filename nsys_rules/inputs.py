"""Turning command-line paths into open traces.

An nsys ``parquetdir``/``arrowdir`` export folder is one trace; other directories expand to the
exports inside them; ``.nsys-rep`` reports are exported with ``nsys export`` (to SQLite, or to
a parquetdir with ``--export-format parquetdir``) into a temporary folder, never beside the
user's file. Which loader opens a path is the registry's (``register_loaders``: the built-in ones of
:mod:`nsys_rules.builtin_loaders` first, then plugins'); the memory guard is built here, once per trace.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from nsys_rules import builtin_loaders
from nsys_rules.errors import InputError
from nsys_rules.loaders import EXPORT_FORMATS
from nsys_rules.loaders.folders import folder_kind
from nsys_rules.loaders.columnar import ColumnarExport
from nsys_rules.loaders.export import Export
from nsys_rules.loaders.read_guard import install_meter
from nsys_rules.nsys_locate import locate_nsys, missing_message
from nsys_rules.nsys_run import export_time_limit, sigterm_unwinds
from nsys_rules.textsafe import clip_value, shell_word
from nsys_rules.model.trace import Trace

TRACE_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


def expand_inputs(paths: list[str], loaders: Mapping[str, Callable[..., Any]] | None = None) -> list[Path]:
    """Files and export folders as given; other folders replaced by the traces directly inside them (sorted).

    A trace inside a folder is a file of a loader's suffix (or ``.nsys-rep``), or a folder a loader claims
    (``loaders``: the registry's; None: the built-in ones).
    """
    table = dict(builtin_loaders.LOADERS) if loaders is None else loaders
    out: list[Path] = []
    suffixes = TRACE_SUFFIXES + tuple(s for s, loader in table.items() if not _is_builtin(loader))
    for raw in paths:
        path = Path(raw)
        if folder_kind(path) is not None or (path.is_dir() and _claimant(table, path) is not None):
            out.append(path)  # a parquetdir/arrowdir export (or a folder a plugin's loader claims) is one trace
        elif path.is_dir():
            found = sorted(p for p in path.iterdir() if _is_trace(p, suffixes, table))
            below = _traces_below(path, found, suffixes, table)
            if not found:
                raise InputError(f"{path}: folder holds no traces (*.sqlite, *.nsys-rep, *.parquetdir, *.arrowdir)"
                                 + (f"; only its top level is searched, and {below}" if below else ""))
            if below:
                # Only the top level is read: say what was left, so a run over runs/ does not silently judge half.
                sys.stderr.write(f"nsys-rules: {clip_value(path, 200)}: only its top level is searched; {below}\n")
            out.extend(found)
        else:
            out.append(path)
    return out


def _is_trace(path: Path, suffixes: tuple[str, ...], table: Mapping[str, Callable[..., Any]]) -> bool:
    """A trace file of a loader's suffix, or an export folder (built-in or a plugin loader's)."""
    if path.is_file():
        return path.suffix.lower() in suffixes
    return path.is_dir() and (folder_kind(path) is not None or _claimant(table, path) is not None)


#: Subfolders looked into (one level down) for traces a folder's run leaves out; beyond it, "more" is said.
_BELOW_LIMIT = 200


def _traces_below(path: Path, found: list[Path], suffixes: tuple[str, ...],
                  table: Mapping[str, Callable[..., Any]]) -> str | None:
    """What a folder's subfolders hold that the run leaves out (one level down, bounded), in words; None when none."""
    kept = set(found)
    folders = sorted(p for p in path.iterdir() if p.is_dir() and p not in kept)[:_BELOW_LIMIT]
    counts: dict[str, int] = {}
    for folder in folders:
        try:
            n = sum(1 for p in folder.iterdir() if _is_trace(p, suffixes, table))
        except OSError:
            continue
        if n:
            counts[folder.name] = n
    if not counts:
        return None
    names = ", ".join(f"{shell_word(name)}/ ({n})" for name, n in list(counts.items())[:3])
    more = f" and {len(counts) - 3} more" if len(counts) > 3 else ""
    first = shell_word(str(path / next(iter(counts))))
    return (f"{sum(counts.values())} trace(s) in its subfolders {names}{more} are not checked; name them to check "
            f"them (e.g. `nsys-rules check {first}`)")


#: Reports nsys exports first (to ``--export-format``); no loader takes these suffixes.
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: What a ``.nsys-rep`` is exported to -> the built-in loader of that format.
_EXPORTED_AS = {"sqlite": ".sqlite", "parquetdir": ".parquetdir", "arrowdir": ".arrowdir"}


def open_trace(path: Path, loaders: Mapping[str, Callable[..., Any]] | None = None,
               export_format: str = "sqlite", max_memory: int | None = None, per_text_value: int = 0) -> Trace:
    """Open one trace read-only; :class:`InputError` with one line when it cannot be used.

    ``loaders`` is the registry's (suffix -> loader, built-ins first; None: the built-in ones only).
    The loader of the path's suffix opens it, else the first that ``claims`` it, else the SQLite one;
    ``export_format`` is the ``nsys export --type`` a ``.nsys-rep`` is exported to first.
    The memory guard is built here, once, from ``max_memory`` (``--max-memory`` in bytes; None: 80 % of
    the available memory) and ``per_text_value`` (see :func:`~nsys_rules.loaders.read_guard.install_meter`),
    and handed to the export before the trace reads its metadata.
    """
    table = dict(builtin_loaders.LOADERS) if loaders is None else loaders
    suffix = path.suffix.lower()
    label = str(path)
    if suffix in REPORT_SUFFIXES:
        export = _open_report(path, export_format)
    else:
        loader = table.get(suffix) or _claimant(table, path) or table.get(".sqlite") or builtin_loaders.open_sqlite
        opened = _load(loader, path, suffix)
        if isinstance(opened, Trace):  # a plugin's loader made the trace itself: metered from now on
            install_meter(opened.export, max_memory, opened.label, per_text_value)
            return opened
        export = opened
    install_meter(export, max_memory, label, per_text_value)
    try:
        return Trace(export, label=label)
    except BaseException:
        export.close()  # a trace that cannot open keeps no file open (and no folder exported for it)
        raise


def _is_builtin(loader: Callable[..., Any]) -> bool:
    return any(loader is own for own in builtin_loaders.LOADERS.values())


def _claimant(loaders: Mapping[str, Callable[..., Any]], path: Path) -> Callable[..., Any] | None:
    """The first loader whose ``claims(path)`` says the path is its kind (a built-in: an export folder by its files)."""
    for suffix, loader in loaders.items():
        claims = getattr(loader, "claims", None)
        if claims is None:
            continue
        if _is_builtin(loader):
            if claims(path):
                return loader
            continue
        try:
            if claims(path):
                return loader
        except Exception as exc:  # noqa: BLE001 - a plugin's bug on this path: say whose, one line
            raise InputError(f"{path}: the plugin loader for {suffix} failed: {type(exc).__name__}: {exc}") from exc
    return None


def _load(loader: Callable[..., Any], path: Path, suffix: str) -> Trace | Export:
    """What ``loader`` made of ``path``: a trace or an export; a plugin's failure as one line."""
    if _is_builtin(loader):
        return loader(path)
    try:
        opened = loader(path)
    except InputError:
        raise
    except SystemExit as exc:
        raise InputError(f"{path}: the plugin loader for {suffix} called sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001 - a plugin's bug on this file: say whose, one line
        raise InputError(f"{path}: the plugin loader for {suffix} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(opened, (Trace, Export)):
        raise InputError(f"{path}: the loader for {suffix} returned {type(opened).__name__}, not a Trace")
    return opened


def _open_report(path: Path, export_format: str) -> Export:
    """A ``.nsys-rep`` exported by nsys into a temporary folder, opened by the built-in loader of that format;
    the folder is the export's own (removed when it closes)."""
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
        export = builtin_loaders.LOADERS[_EXPORTED_AS[export_format]](target)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if isinstance(export, ColumnarExport):
        export.owned_folder = folder
    return export
