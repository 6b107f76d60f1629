"""Process-wide memory tuning for big traces.

glibc's malloc raises its mmap threshold each time a large block is freed, so after the
loader frees its first column buffers, every later million-row array comes from the heap, and
the heap cannot return freed holes to the system: the resident set stays well above what is
alive. A fixed threshold keeps large arrays in their own mappings, which go back to the system
the moment numpy frees them (docs/performance.md has the measurements).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
from typing import Any, Iterator

#: mallopt parameter number of M_MMAP_THRESHOLD in glibc's malloc.h.
_M_MMAP_THRESHOLD = -3
#: Blocks of this size or more get their own mapping, kept fixed. Million-row columns stay above
#: it, so they go back to the system when freed; smaller temporaries (a million-row mask, a batch
#: of a few thousand rows) come from the heap and are reused, where glibc's initial threshold
#: would make each a fresh mapping faulted in page by page.
MMAP_THRESHOLD = 2 * 1024 * 1024

#: Rows per chunk of the loops that walk row-length arrays a piece at a time (analysis/intervals.py
#: and its users, the loaders' checks and gathers): 128 KB as int64, so each chunk's temporaries are
#: reused from the top of the heap. glibc maps a block of the mmap threshold or more afresh (a 2 MB
#: chunk of int64 is just over it with malloc's header), and hands a free top of the heap over 128 KB
#: (its default trim threshold) back to the system: either way every page of every temporary was
#: faulted in and zeroed again, chunk after chunk.
CHUNK_ROWS = 1 << 14

_done = False
_libc: Any = None


def _c_library() -> Any:
    """The C library's functions, through the process's own symbols. Not ``ctypes.util.find_library``:
    it runs ``ldconfig`` in a subprocess (2-5 ms a call, and its imports ~10 ms) before the read-ahead
    can start, and again at each release."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    return _libc


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold (Linux only; elsewhere, or on musl, nothing happens). True when applied."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        mallopt = _c_library().mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return _done


def release_free_memory() -> None:
    """Hand memory the allocators keep for reuse back to the system (after the preload's big reads).

    Arrow's mimalloc pool and glibc's per-thread arenas keep the pages of freed record batches
    (the two preload threads each hold their own), which every rule would otherwise carry on top
    of the frames. A no-op where the calls do not exist.
    """
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        try:
            pyarrow.default_memory_pool().release_unused()
        except Exception:  # noqa: BLE001 - best effort: an old pyarrow without release_unused
            pass
    if sys.platform.startswith("linux"):
        try:
            _c_library().malloc_trim(0)
        except (OSError, AttributeError):
            pass


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one command, then back as it was.

    A check imports pandas, pyarrow and the rules (hundreds of thousands of objects) and then
    works on numpy arrays, which hold no reference cycles: the collector's passes over the imported
    objects found next to nothing and cost 45-75 ms of the main thread in a 1.5 s check of a
    1M-kernel trace (docs/performance.md). Objects are still freed by reference counting as before;
    only cycles wait, and ``parallel.analyze_job`` collects them after each trace of a several-trace run.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
