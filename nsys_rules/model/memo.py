"""One trace's memo: the facts built from a trace, each at most once, kept as long as the trace.

Every model fact that is costly to build (the GPU activity table, the step model, the budget, the
framework, the launch join's key index, ...) is asked for by many readers, and the rules of one
trace run in several threads (:mod:`nsys_rules.rule_threads`). :class:`Memo` is where those facts
live: one dictionary per trace, so closing the trace frees them all, and one lock, so two threads
asking for the same fact at once build it once: the second waits for the first's value.

A key is a tuple whose first item names the fact (``"activity.gpu_ops"``, module-qualified so two
modules never share one) and whose other items are its arguments (``SteadyOptions``, a table name).

A fact built from a frame the trace may later replace (a table read again with more columns) is
checked by ``fresh``: an entry ``fresh`` refuses is built again and replaces the old one, so a
replaced frame is never pinned by a fact built from it.
"""

from __future__ import annotations

import threading
from typing import Callable, Hashable, TypeVar, cast

T = TypeVar("T")

#: A memo key: the fact's module-qualified name first, then its arguments.
MemoKey = tuple[Hashable, ...]


class _Slot:
    """One key's lock and value: the lock is held while the value is built, so a second asker waits."""

    __slots__ = ("lock", "entry")

    def __init__(self) -> None:
        # Reentrant: a build that (by a bug) asks for its own key fails by recursion, not by a silent hang.
        self.lock = threading.RLock()
        # (value,) once built: one attribute, so a reader without the lock sees a whole entry or none.
        self.entry: tuple[object] | None = None


class Memo:
    """A per-trace cache of built facts, safe to share between threads.

    ``get(key, build)`` returns the value kept under ``key``, building it with ``build()`` first
    when there is none (or ``fresh`` refuses the one kept). Each key has its own lock, held only
    while its value is built: threads building different facts do not wait for each other, and a
    build may ask for other keys (the budget asks for the step model). Facts depend on each other
    without cycles, so the locks are always taken in one order and cannot deadlock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards ``_slots`` itself, never held during a build
        self._slots: dict[MemoKey, _Slot] = {}

    def get(self, key: MemoKey, build: Callable[[], T], fresh: Callable[[T], bool] | None = None) -> T:
        """The value under ``key``, built by ``build()`` once (again only where ``fresh(value)`` is False)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
        entry = slot.entry
        if entry is not None and (fresh is None or fresh(cast(T, entry[0]))):
            return cast(T, entry[0])  # the common case: built already, no lock taken
        with slot.lock:
            entry = slot.entry
            if entry is not None and (fresh is None or fresh(cast(T, entry[0]))):
                return cast(T, entry[0])  # another thread built it while this one waited
            slot.entry = entry = None  # the stale value goes before its replacement is built (never both held)
            value = build()
            slot.entry = (value,)
            return value

    def peek(self, key: MemoKey) -> object | None:
        """The value under ``key`` if one is built (None otherwise): builds nothing and waits for nothing."""
        slot = self._slots.get(key)
        entry = slot.entry if slot is not None else None
        return entry[0] if entry is not None else None

    def clear(self) -> None:
        """Forget every value (the trace is closed)."""
        with self._lock:
            self._slots.clear()
