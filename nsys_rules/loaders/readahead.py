"""Reading a trace's big tables while the program is still starting.

``check`` on one trace spends its first half second importing pandas, the engine and the rules
on one core, and only then reads the kernel and API tables, which need none of that: the Arrow
readers step SQLite and decode Parquet without holding the GIL. :func:`start`, called right
after the command line is parsed, begins those reads in background threads; the export that
opens the same file later (:func:`claim`) takes the columns from them instead of reading them.

What is read early is what every check reads: :data:`EARLY_COLUMNS` (the columns of the kernel,
API and NVTX tables that the GPU activity table and the step model read in every run; a test
keeps them within ``analysis.steps.model_needs``). Columns that a selected rule or a plugin
needs beyond them are read by the engine's preload, as before; a column read early is handed
over once and never read twice. The loader's result does not change: the early read is the
export's own reader with the same columns, batches and narrow types, and one that fails is
done again by the export, which then reports any error itself.

No read-ahead when it could change what the user sees: a memory limit given by the user (the
guard must judge every read first) or an early read of more than a quarter of the available
memory; an unmerged ``-wal``/``-journal`` beside the file (read from a private copy); a table
with an index (two queries over it could return rows in different orders).

The export that claims the read-ahead does not wait for a read the workers have not begun: it
cancels it and reads those columns itself, beside the worker's read in progress
(:meth:`ReadAhead.take`). A folder export's big tables are planned as two reads of half their
columns each (Parquet and Arrow read columns independently), so that once the imports are done
the main thread and the worker share what is left of the reading on two cores.

Only the standard library is imported when this module loads; :func:`start` imports numpy, pyarrow
and the readers in the main thread before the workers begin (see :func:`_import_for_workers`).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

from nsys_rules.loaders import claims
from nsys_rules.loaders.taking import NOTHING, Early, Taking, Unit

#: Canonical columns read early, by table: every check reads them (the GPU activity table and
#: the step model), whatever rules are selected.
EARLY_COLUMNS: dict[str, tuple[str, ...]] = {
    "api": ("start", "end", "correlation_id", "pid", "tid", "name"),
    "kernels": ("start", "end", "device_id", "stream_id", "pid", "correlation_id", "name", "grid_x", "grid_y",
                "grid_z", "block_x", "block_y", "block_z"),
    "nvtx": ("start", "end", "name", "pid", "tid", "domain_id", "event_type"),
}
#: Share of the memory the guard allows by default that an early read may take (see memory_limit).
MEMORY_SHARE = 0.25
#: Rows from which a folder export's early table is read as two halves of its columns (see the module doc).
SPLIT_ROWS = 250_000
#: Seconds :func:`stop` waits for the read-ahead's threads (a stopped read ends within one batch).
STOP_WAIT = 3.0
#: Python's thread switch interval (seconds) while the early reads run. A reader gives the GIL up at
#: each batch (its decoding or SQLite stepping runs without it) and then waits for the main thread,
#: busy importing pure Python, to drop it: at the default 5 ms, the ~80 hand-overs of a Parquet read
#: of the big trace's early columns take 0.4 s, as long as the imports, so almost none of the read
#: ran beside them.
SWITCH_INTERVAL = 0.0005


class ReadAhead:
    """Background reads of one trace's early columns (see the module doc)."""

    def __init__(self, path: Path, identity: tuple[Any, ...], workers: int) -> None:
        self.path = path
        self.identity = identity
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._pool = _Workers(workers)
        self._interval = _SwitchInterval()
        #: One-row metadata answers of the file (SQLite row counts, stored bytes), by (SQL, parameters).
        self.answers: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}
        self._plan: Future[dict[str, list[Unit]]] = self._pool.submit(self._make_plan)
        self._claimed = False

    # -- worker side -----------------------------------------------------------------------
    def _make_plan(self) -> dict[str, list[Unit]]:
        claims.worker.opening = True  # this export reads for the read-ahead: it must not claim it
        try:
            export = _open(self.path)
        except Exception:  # noqa: BLE001 - not readable here: the export opened later says why
            self._interval.restore()
            return {}
        finally:
            claims.worker.opening = False
        if hasattr(export, "_answers"):
            export._answers = self.answers  # its one-row answers go to the export that claims this read-ahead
        plans = []
        try:
            from nsys_rules.loaders.memory_limit import column_bytes, default_limit
            from nsys_rules.loaders.tables import TABLES

            total = 0
            limit = default_limit()
            share = int(limit * MEMORY_SHARE) if limit is not None else None
            for name, cols in EARLY_COLUMNS.items():
                table = TABLES[name]
                source = export.source_of(table)
                if source is None or not export.early_read_safe(source):
                    continue
                _, src_cols, narrow = export.source_columns(table, [table.column(c) for c in cols], source)
                rows = export.count(source)
                total += rows * sum(column_bytes(name, c) for c in cols)
                if hasattr(export, "decoded_price"):  # a folder: what its headers say the read decodes
                    found = export.decoded_price(source, src_cols, share)
                    total += found.transient + found.text.memory + max(found.rows - rows, 0) * 8 * len(cols)
                plans.append((rows, source, src_cols, frozenset(narrow)))
            if share is not None and total > share:
                plans = []
        except Exception:  # noqa: BLE001 - a damaged schema: the export opened later reports it
            plans = []
        plans.sort(key=lambda p: -p[0])  # the biggest table first: it finishes last
        units: dict[str, list[Unit]] = {}
        for rows, source, cols, narrow in plans:
            halves = [cols] if getattr(export, "parallel_reads", True) else _halves(cols, narrow, rows)
            units[source] = [Unit(tuple(part), narrow, self._pool.submit(self._read, export, source, part, narrow))
                             for part in halves]
        meta = self._pool.submit(self._ask_metadata, export, [source for _, source, _, _ in plans])
        _close_when_done(export, [u.future for parts in units.values() for u in parts] + [meta],
                         self._interval.restore)
        return units

    def _ask_metadata(self, export: Any, early: list[str]) -> None:
        """Ask what the engine asks of the file before its reads, so its answers are there (see ``SqliteExport._query``):
        every canonical table's row count, and the stored bytes of the early tables (the memory guard)."""
        from nsys_rules.loaders.stored_bytes import table_storage
        from nsys_rules.loaders.tables import TABLES

        try:
            for table in TABLES.values():
                source = export.source_of(table)
                if source is not None and not self.stop_event.is_set():
                    export.count(source)
            for source in early:
                if hasattr(export, "_query") and not self.stop_event.is_set():
                    table_storage(export, source)
        except Exception:  # noqa: BLE001 - the engine asks again and reports what is wrong
            pass

    def _read(self, export: Any, source: str, columns: list[str], narrow: frozenset[str]) -> Early | None:
        from nsys_rules.loaders.batches import note_column

        if self.stop_event.is_set():
            return None
        seen = len(export.damage)
        try:
            raw = export.fetch_direct(source, columns, narrow, self.stop_event)
        except Exception:  # noqa: BLE001 - the export reads it again and reports what is wrong
            return None
        notes: dict[str, list[str]] = {}
        for line in export.damage[seen:]:
            notes.setdefault(note_column(line, source), []).append(line)
        return Early(narrow, raw, notes)

    # -- export side -----------------------------------------------------------------------
    def take(self, source: str, columns: list[str], narrow: set[str] | frozenset[str]) -> Taking:
        """This table's early reads for ``columns`` (read with the same narrow types).

        A read the workers have not begun is cancelled: the caller reads its columns itself (those
        outside :attr:`Taking.covered`) while the begun ones finish, then waits for them with
        :meth:`Taking.wait`, rather than waiting for a worker to reach a read it could do now.
        """
        try:
            units = self._plan.result().get(source, [])
        except Exception:  # noqa: BLE001 - no plan (the read-ahead failed or stopped): the export reads it
            return NOTHING
        return Taking(self._lock, [u for u in units if not u.future.cancel()], columns, narrow)

    def stop(self) -> None:
        """Stop the reads (each within one batch) and wait for the threads (see :class:`_Workers`)."""
        self.stop_event.set()
        self._pool.shutdown()
        self._interval.restore()


class _SwitchInterval:
    """:data:`SWITCH_INTERVAL` from now until :meth:`restore` (the first call puts the previous one back)."""

    def __init__(self) -> None:
        self._before = sys.getswitchinterval()
        self._lock = threading.Lock()
        self._restored = False
        sys.setswitchinterval(min(self._before, SWITCH_INTERVAL))

    def restore(self) -> None:
        """Put the interval found at the start back, once."""
        with self._lock:
            if not self._restored:
                self._restored = True
                sys.setswitchinterval(self._before)


class _Workers:
    """A few daemon threads that run submitted calls in turn; :meth:`shutdown` waits for them, for a while.

    Not a ``ThreadPoolExecutor``, whose threads Python waits for at exit without end: a Ctrl-C that
    lands in the main thread inside the import machinery can leave Python's import lock taken (a
    CPython flaw), and a worker whose garbage collection then frees a module lock waits for it
    forever. Such a worker is given up after :data:`STOP_WAIT` seconds; it waits on a Python lock,
    not inside a reader's C code (a thread there when Python exits aborts the process), and a
    stopped read otherwise ends within one batch.
    """

    def __init__(self, count: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._futures: list[Future[Any]] = []
        self._threads = [threading.Thread(target=self._loop, name=f"nsys-rules-readahead-{i}", daemon=True)
                         for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``call(*args)`` on a worker; its result or exception goes to the returned future."""
        future: Future[Any] = Future()
        self._futures.append(future)
        self._queue.put((future, call, args))
        return future

    def shutdown(self) -> None:
        """Cancel the calls not begun and wait (at most :data:`STOP_WAIT` s) for the threads to end."""
        for future in self._futures:
            future.cancel()
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + STOP_WAIT
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(deadline - time.monotonic(), 0))

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            future, call, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)


def _halves(columns: list[str], narrow: frozenset[str], rows: int) -> list[list[str]]:
    """``columns`` of a folder export's table as two reads of about equal bytes per row (one read below
    :data:`SPLIT_ROWS` rows, where a second read costs more than it shares)."""
    if rows < SPLIT_ROWS or len(columns) < 2:
        return [columns]
    parts: list[list[str]] = [[], []]
    sizes = [0, 0]
    for c in sorted(columns, key=lambda c: c in narrow):  # the 8-byte columns first, then the int32 ones
        lighter = sizes.index(min(sizes))
        parts[lighter].append(c)
        sizes[lighter] += 4 if c in narrow else 8
    return [[c for c in columns if c in part] for part in parts]


def _close_when_done(export: Any, futures: list[Future[Any]], then: Callable[[], None]) -> None:
    """Close ``export`` (its metadata connection), then call ``then``, once every one of ``futures`` is done."""
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            export.close()
            then()

    if not futures:
        export.close()
        then()
    for future in futures:
        future.add_done_callback(one_done)


def _open(path: Path) -> Any:
    from nsys_rules.loaders.arrowdir import ArrowDirExport
    from nsys_rules.loaders.folders import folder_kind

    kind = folder_kind(path)
    if kind is not None:
        from nsys_rules.loaders.memory_limit import default_limit
        from nsys_rules.loaders.read_guard import ReadGuard

        export = ArrowDirExport(path, kind)
        # Its reads stop (and the engine's own read, priced first, says why) past their share of the memory.
        limit = default_limit()
        export.meter = ReadGuard(int(limit * MEMORY_SHARE) if limit is not None else None, False, label=str(path))
        return export
    from nsys_rules.loaders.sqlite import SqliteExport

    return SqliteExport(path)


def start(trace: str, limit_set: bool) -> None:
    """Begin the early reads of ``trace`` (a ``.sqlite`` file or an export folder) in background threads.

    ``limit_set``: the user gave a memory limit (flag or config), so nothing is read before the guard.
    """
    stop()
    path = Path(trace)
    if limit_set or not (path.suffix.lower() == ".sqlite" or path.is_dir()):
        return  # a .nsys-rep is exported first; other suffixes may belong to a plugin's loader
    found = claims.identity(path)
    if found is None:
        return
    _import_for_workers(path.is_dir())
    # The kernel and API tables at once where there are two cores, and the metadata queries beside them.
    # Parquet reads are cheap, and two in flight from the start add their batches to the peak: one worker,
    # and the main thread shares what is left once its imports are done (see take()).
    workers = 3 if (os.cpu_count() or 1) >= 2 and not path.is_dir() else 1
    claims.publish(ReadAhead(path, found, workers))


def _import_for_workers(folder: bool) -> None:
    """Import, here in the main thread, every module the reads use, so that the workers import nothing.

    A Ctrl-C that lands while the main thread imports can leave Python's import lock taken (a
    CPython flaw): a worker importing then would wait forever, and so would the main thread's next
    import if the worker held that module's lock, or :func:`stop` waiting for the worker. numpy and
    pyarrow are the main thread's next imports anyway (pandas needs them). Not ``pyarrow.compute``
    (0.04 s): no early read uses it, nor anything that imports pandas (see ``loaders/batches.py``).
    """
    import numpy  # noqa: F401
    import pyarrow  # noqa: F401

    from nsys_rules.loaders import memory_limit, read_guard, stored_bytes  # noqa: F401
    from nsys_rules.loaders import arrowdir, batches, export, split, sqlite, tables  # noqa: F401

    if folder:
        import pyarrow.parquet  # noqa: F401
    else:
        import adbc_driver_sqlite

        adbc_driver_sqlite.connect().close()  # finds the driver library (its lookup imports on first use)


def claim(path: Path) -> ReadAhead | None:
    """The read-ahead of ``path`` when one was started for this very file (unchanged since), else None."""
    return claims.claim(path)


def stop() -> None:
    """Stop any read-ahead and wait for its threads (at the end of a run, or before starting another)."""
    ahead = claims.withdraw()
    if ahead is not None:
        ahead.stop()
