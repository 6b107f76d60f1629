"""Running one trace's rules side by side on hosts with many cores.

After the preload, the step model and the budget, the rules are independent readers of the same
frames, and their work is mostly numpy and pandas loops that release the GIL. On a host with 8 or
more usable cores they run in a few threads; elsewhere one after another, as before: on fewer
cores the threads would only add their temporaries to the peak. Results come back in the rules'
order, so the report is the same either way (tests compare the JSON of both).

``NSYS_RULES_RULE_THREADS=N`` sets the thread count (1: one after another). A memory limit
(``--max-memory``) keeps the rules serial, since its estimate assumes one rule's transients at a time.
Plugin rules always run in the main thread, one at a time: their authors never promised thread safety.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Usable cores from which the rules run in threads by default.
MIN_CORES = 8
#: Threads at most by default: beyond this the rules' transients add more memory than they save time.
MAX_THREADS = 4
ENV = "NSYS_RULES_RULE_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (its affinity), or the machine's count where that is unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_count(rules: int, memory_limited: bool) -> int:
    """How many threads run ``rules`` rules: ``NSYS_RULES_RULE_THREADS`` if set, else by the cores."""
    if memory_limited or rules < 2:
        return 1
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            return max(1, min(int(raw), rules))
        except ValueError:
            return 1  # an unreadable value keeps the default behaviour of old versions: one at a time
    cores = usable_cores()
    return min(MAX_THREADS, rules, cores // 4) if cores >= MIN_CORES else 1


def run_all(items: Sequence[T], call: Callable[[T], R], threads: int,
            started: Callable[[T], Any] | None = None, shareable: Callable[[T], bool] = lambda item: True) -> list[R]:
    """``call`` on every item, in ``threads`` threads when more than one; results in the items' order.

    Items that are not ``shareable`` run in the calling thread, one at a time, while the others run.
    """
    if threads <= 1:
        out = []
        for item in items:
            if started:
                started(item)
            out.append(call(item))
        return out
    pool = ThreadPoolExecutor(threads, thread_name_prefix="nsys-rules-rule")
    try:
        futures = {i: pool.submit(call, item) for i, item in enumerate(items) if shareable(item)}
        here: dict[int, R] = {}
        for i, item in enumerate(items):
            if started:
                started(item)
            if i not in futures:
                here[i] = call(item)
        return [futures[i].result() if i in futures else here[i] for i in range(len(items))]
    finally:
        # Ctrl-C or an error in the main thread: queued rules never start, and the exit does not wait
        # for the running ones (each is time-limited by the isolation anyway).
        pool.shutdown(wait=False, cancel_futures=True)
