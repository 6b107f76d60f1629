"""Checks made before an export is opened, so that hostile input ends in one clear line.

Two jobs:

* :func:`check_file` refuses anything that is not a readable regular file holding a SQLite
  header (a FIFO would block ``open`` forever, a device would stream bytes), with a line
  saying what is wrong and what to do.
* :func:`pending_sidecar` / :func:`private_copy` deal with a ``-wal`` or hot ``-journal``
  file beside the export. The loader opens with ``immutable=1`` (no locks, no files created),
  and SQLite then ignores those sidecars: the rows they hold would silently be missing, a
  wrong number presented as fact. So when one holds data, the export and the sidecar are
  copied into a private temporary folder and SQLite applies them there; the user's files
  are never touched. Before copying, :func:`check_copy_room` refuses (exit 3, with the
  reason) a sidecar that is sparse (a few kB on disk that would be copied as gigabytes) or a
  copy the temporary folder has no room for.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path

from nsys_rules.errors import InputError
from nsys_rules.textsafe import shell_word

SQLITE_MAGIC = b"SQLite format 3\x00"

_EXPORT_HINT = "give an nsys SQLite export (`nsys export --type=sqlite REPORT.nsys-rep`)"


#: Leading bytes of the compressed formats traces travel in -> (name with its article, the suffix its tool
#: expects, the command that unpacks a copy beside the file, the one that writes it to stdout).
_PACKED = ((b"\xfd7zXZ\x00", ("an xz", ".xz", "xz -dk", "xz -dc")),
           (b"\x1f\x8b", ("a gzip", ".gz", "gzip -dk", "gzip -dc")),
           (b"\x28\xb5\x2f\xfd", ("a zstd", ".zst", "zstd -d", "zstd -dc")),
           (b"BZh", ("a bzip2", ".bz2", "bzip2 -dk", "bzip2 -dc")),
           (b"PK\x03\x04", ("a zip", "", "unzip", "unzip -p")))


def packed_hint(path: Path, header: bytes) -> str | None:
    """What to do with a compressed trace (issue 42: an ``.xz`` trace got "not a SQLite file" with no hint), or
    None when ``header`` starts no compressed format: the command that unpacks it (its tool keeps the original)."""
    found = next((known for magic, known in _PACKED if header.startswith(magic)), None)
    if found is None:
        return None
    name, suffix, keep, to_stdout = found
    word = shell_word(str(path))
    if not suffix or path.suffix.lower() == suffix:
        command = f"{keep} {word}"
    else:  # the tool refuses a name without its suffix: unpack to a new file instead
        command = f"{to_stdout} {word} > {shell_word(path.name + '.unpacked.sqlite')}"
    return f"{name}-compressed file, not a SQLite file; decompress it first (`{command}`) and check what it gives"


def check_file(path: Path) -> None:
    """Raise :class:`InputError` unless ``path`` is a readable regular file with a SQLite header."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; check the path") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied on a folder of the path; make it readable") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); {_EXPORT_HINT}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory, not a trace; pass the .sqlite files inside it")
    if not stat.S_ISREG(info.st_mode):
        # Never open a FIFO or device: open() would block or read forever.
        raise InputError(f"{path}: not a regular file (a pipe, socket or device); {_EXPORT_HINT} saved to disk")
    if info.st_size == 0:
        raise InputError(f"{path}: empty file; re-export the report with `nsys export --type=sqlite`")
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except PermissionError:
        raise InputError(f"{path}: permission denied; make the file readable (chmod +r)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); {_EXPORT_HINT}") from None
    if header[:len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        packed = packed_hint(path, header)
        if packed is not None:
            raise InputError(f"{path}: {packed}")
        raise InputError(f"{path}: not a SQLite file; {_EXPORT_HINT}")
    declared = declared_size(header)
    if info.st_size < 512 or (declared is not None and info.st_size < declared):
        # SQLite reads pages past the end as empty: a cut copy would silently lose rows.
        of = f" of the {declared:,} its header declares" if declared else ""
        raise InputError(f"{path}: truncated SQLite file ({info.st_size:,} bytes{of}); copy it again or "
                         "re-export the report with `nsys export --type=sqlite`")


def declared_size(header: bytes) -> int | None:
    """The file size a SQLite header declares (page size x page count), None when it does not say.

    The page count at offset 28 is valid only when the change counter (offset 24) equals the
    version-valid-for number (offset 92), as SQLite itself checks.
    """
    if len(header) < 100:
        return None
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] != header[92:96] or pages == 0 or page_size < 512 or page_size & (page_size - 1):
        return None
    return page_size * pages


#: First bytes of a write-ahead log (either checksum byte order) and of a rollback journal: a sidecar without
#: them holds nothing SQLite would apply, so it is not worth a copy.
WAL_MAGICS = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
JOURNAL_MAGIC = b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7"


def pending_sidecar(path: Path) -> Path | None:
    """A ``-wal`` or hot ``-journal`` file beside ``path`` (non-empty, with SQLite's header): rows not merged yet."""
    try:
        with open(path, "rb") as fh:
            wal_mode = fh.read(20)[18:19] == b"\x02"  # header byte 18: 2 = WAL, 1 = rollback journal
    except OSError:
        return None
    for suffix in ("-wal", "-journal"):
        if suffix == "-wal" and not wal_mode:
            continue  # SQLite ignores a -wal beside a rollback-journal database
        side = path.with_name(path.name + suffix)
        try:
            if side.is_file() and side.stat().st_size > 0:
                with open(side, "rb") as fh:
                    head = fh.read(8)
                if (head[:4] in WAL_MAGICS) if suffix == "-wal" else (head == JOURNAL_MAGIC):
                    return side
        except OSError:
            continue
    return None


#: A sidecar whose data (not holes) covers less than this share of its size is sparse.
SPARSE_SHARE = 0.5
#: Sizes below this are never called sparse (tiny files are cheap to copy whatever they hold).
SPARSE_MIN_BYTES = 1024 * 1024
#: Free space kept in the temporary folder beyond the copy itself.
SPARE_BYTES = 64 * 1024 * 1024
#: Data extents walked at most when looking for holes.
MAX_EXTENTS = 100_000


def data_bytes(file: Path, size: int) -> int | None:
    """Bytes of ``file`` that are data, not holes (``SEEK_DATA``/``SEEK_HOLE``); None where the system cannot say.

    Holes are what makes a file sparse; a compressing file system stores fewer blocks
    than the size without any hole, so block counts alone would wrongly call it sparse.
    """
    if not hasattr(os, "SEEK_DATA"):
        return None
    total, offset = 0, 0
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        for _ in range(MAX_EXTENTS):
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after offset
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            total += end - start
            offset = end
            if offset >= size:
                break
        else:
            return None  # too fragmented to tell: let the free-space check decide
    except OSError:
        return None
    finally:
        os.close(fd)
    return total


def check_copy_room(path: Path, sidecar: Path, folder: Path) -> None:
    """Raise :class:`InputError` when copying ``path`` and ``sidecar`` into ``folder`` is unsafe.

    A sparse sidecar (mostly holes: gigabytes of apparent size, kilobytes on disk) is refused:
    SQLite writes a WAL or journal page by page, and copying one would fill the temporary
    folder with zeros. Then the apparent sizes of both files must fit the folder's free space.
    """
    side_size = sidecar.stat().st_size
    data = data_bytes(sidecar, side_size) if side_size >= SPARSE_MIN_BYTES else None
    if data is not None and data < side_size * SPARSE_SHARE:
        raise InputError(f"{path}: {sidecar.name} beside it is a sparse file ({side_size:,} bytes, {data:,} of them "
                         "data), not a log SQLite wrote; remove it (or copy the export alone) and run again")
    need = path.stat().st_size + side_size
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if need + SPARE_BYTES > free:
        raise InputError(f"{path}: merging {sidecar.name} needs a {need:,}-byte private copy but the temporary folder "
                         f"{folder} has {free:,} bytes free; set TMPDIR to a folder with room, or remove "
                         f"{sidecar.name} if its writer is gone and its rows do not matter")


def private_copy(path: Path, sidecar: Path) -> tuple[Path, Path]:
    """Copy ``path`` and ``sidecar`` into a new temporary folder and merge them there.

    Returns ``(copy, folder)``; the caller removes ``folder`` when done. The merge
    (checkpoint of a WAL, rollback of a hot journal) happens on the copy only.
    """
    try:
        check_copy_room(path, sidecar, Path(tempfile.gettempdir()))
    except OSError as exc:
        raise InputError(f"{path}: cannot inspect {sidecar.name} beside it ({exc.strerror or exc})") from None
    folder = Path(tempfile.mkdtemp(prefix="nsys-rules-"))
    copy = folder / "export.sqlite"
    try:
        shutil.copyfile(path, copy)
        shutil.copyfile(sidecar, folder / ("export.sqlite" + sidecar.name[len(path.name):]))
        db = sqlite3.connect(copy)
        try:
            # Reading applies a hot journal; the checkpoint folds a WAL into the main file.
            db.execute("SELECT count(*) FROM sqlite_master").fetchall()
            if db.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                db.execute("PRAGMA journal_mode=DELETE")
        finally:
            db.close()
    except (OSError, sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise InputError(f"{path}: cannot merge {sidecar.name} beside it ({exc}); "
                         "close the program that writes it, or re-export the report") from None
    except BaseException:  # Ctrl-C during the copy: leave nothing behind
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return copy, folder


def remove_folder(folder: Path | None) -> None:
    """Remove a private copy's folder (ignoring errors: it is ours and temporary)."""
    if folder is not None and os.path.isdir(folder):
        shutil.rmtree(folder, ignore_errors=True)
