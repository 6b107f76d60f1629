"""Where output files may go, and writing them whole or not at all.

``--html``, ``--write-baseline``, ``$GITHUB_STEP_SUMMARY``, ``profile --command-file`` and ``explain --output``
write files.
A typo or a shell glob (``check --html rank0.sqlite rank1.sqlite``) must never turn a trace,
the config or any nsys export into a report, so :func:`guard_outputs` refuses (exit 2), before
anything runs, an output path that

* is one of the inputs (same file through any path, symlink or hard link),
* is an existing nsys export or database: a ``.nsys-rep``/``.qdrep`` report, a SQLite file, a
  ``.parquetdir``/``.arrowdir`` export folder or a file inside one,
* is a folder, or an existing file that is not a regular file (a FIFO would block the run),
* is given to two outputs at once.

:func:`write_atomic` writes a temporary file in the target's folder and renames it over the
target (``os.replace``): readers see the old file or the new one, never half a report, and a
crash or Ctrl-C leaves the old file in place (the temporary one is removed).
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from nsys_rules.errors import UsageError
from nsys_rules.textsafe import STREAM_ERRORS, clip_value

#: Suffixes of nsys reports and of files inside parquetdir/arrowdir exports.
_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
_EXPORT_FOLDER_SUFFIXES = (".parquetdir", ".arrowdir")
_EXPORT_MARKERS = ("StringIds.parquet", "StringIds.arrow")
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _export_folder(folder: Path) -> bool:
    if folder.name.lower().endswith(_EXPORT_FOLDER_SUFFIXES):
        return True
    return any((folder / marker).is_file() for marker in _EXPORT_MARKERS)


def output_problem(path: Path, inputs: Iterable[Path] = ()) -> str | None:
    """Why writing a report to ``path`` would destroy something, or None when it is safe."""
    for source in inputs:
        if _same_file(path, Path(source)):
            return f"is an input ({clip_value(source, 200)})"
    if path.name.lower().endswith(_REPORT_SUFFIXES) and os.path.lexists(path):
        return "is an existing nsys report"
    if _export_folder(path.parent if str(path.parent) else Path(".")):
        return "is inside an nsys export folder"
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be checked ({exc.strerror or exc})"
    if stat.S_ISDIR(info.st_mode):
        return "is a folder" + (" (an nsys export)" if _export_folder(path) else "")
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a pipe, socket or device)"
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError:
        return None  # unreadable: the write itself will say why
    if head == _SQLITE_MAGIC:
        return "is a SQLite database (an nsys export?)"
    return None


def guard_output_folder(flag: str, folder: Path) -> None:
    """Raise :class:`UsageError` unless ``folder`` is a folder or absent, and not an nsys export folder."""
    problem = None
    if os.path.lexists(folder) and not folder.is_dir():
        problem = output_problem(folder) or "is a file, not a folder"
    elif folder.is_dir() and _export_folder(folder):
        problem = "is an nsys export folder"
    if problem:
        raise UsageError(f"{flag} {clip_value(folder, 200)} {problem}; refusing to write into it (choose another folder)")


def guard_outputs(outputs: Mapping[str, str | os.PathLike[str] | None], inputs: Iterable[Path] = (),
                  may_replace: Mapping[str, str | os.PathLike[str] | None] | None = None) -> None:
    """Raise :class:`UsageError` (exit 2) when an output would overwrite an input, an export or another output.

    ``outputs`` maps a flag (``--html``) to its path (None: not asked for); ``may_replace`` maps
    a flag to the one input it is allowed to replace (``--write-baseline`` over ``--baseline``).
    """
    inputs = [Path(p) for p in inputs]
    chosen: list[tuple[str, Path]] = []
    for flag, raw in outputs.items():
        if raw is None or raw == "":
            continue
        path = Path(raw)
        allowed = (may_replace or {}).get(flag)
        others = [p for p in inputs if allowed is None or not _same_file(p, Path(allowed))]
        problem = output_problem(path, others)
        if problem is None:
            problem = next((f"is also the {other} output" for other, p in chosen if _same_file(path, p)), None)
        if problem:
            raise UsageError(f"{flag} {clip_value(path, 200)} {problem}; refusing to write over it (choose another path)")
        chosen.append((flag, path))


def _mode_for_new_file() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, text: str, what: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    :class:`UsageError` (exit 2) with one line when the folder cannot take it.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else _mode_for_new_file()
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:100]}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {what} {clip_value(path, 200)}: {exc.strerror or exc}") from None
    try:
        # Text a file name's odd byte reached (a lone surrogate) is written as its \xHH escape, not refused.
        with os.fdopen(fd, "w", encoding="utf-8", errors=STREAM_ERRORS) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {what} {clip_value(path, 200)}: {exc.strerror or exc}") from None
        raise


def append_atomic(path: Path, text: str, what: str) -> None:
    """Append ``text`` to the regular file ``path`` (created when absent) in one locked ``O_APPEND`` write.

    Runs side by side (a matrix job's steps, ``xargs -P``) append to one ``$GITHUB_STEP_SUMMARY``: each
    section lands whole at the end, none is lost (a read, then a rename of old + new, kept only the last
    writer's copy). The file's other text is never read or rewritten. :class:`UsageError` (exit 2) with one
    line when the file cannot take it.
    """
    path = Path(path)
    data = text.encode("utf-8", STREAM_ERRORS)  # a file name's odd byte is written as its \xHH escape
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise UsageError(f"cannot append to {what} {clip_value(path, 200)}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"cannot append to {what} {clip_value(path, 200)}: not a regular file")
        # The lock keeps sections whole even where a write comes back short (a signal, a full disk: the rest
        # follows before another run's section); the one O_APPEND write is whole on its own on a local disk.
        fcntl.flock(fd, fcntl.LOCK_EX)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise UsageError(f"cannot append to {what} {clip_value(path, 200)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)  # closing drops the lock
