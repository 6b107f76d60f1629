"""Where in the step the host keeps the GPU waiting: one block between steps, or spread between launches.

The budget's idle parts (:mod:`.budget_idle`) say what the launching thread was doing while the
GPU idled: in its own code or a CUDA call (``launch_wait``), released by a synchronization
(``after_sync``), allocating, loading modules. They do not say *where* in the step it happened,
and that decides the fix:

- a block of host work the GPU waits through, usually between two steps (the host prepares the
  next batch, tokenizes, augments images, builds the next input in numpy), is input preparation:
  CUDA graphs or a faster launch path do not touch it; a data loader with workers, prefetching
  to the device or preprocessing on the GPU does (part ``host_prep``);
- host time spread between the launches of a step is launch overhead (``launch_wait``);
- after a synchronization, the host's work before its next launch could have run while the GPU
  worked, had it launched the next step before waiting: removing the wait recovers that work up
  to the GPU time of a step (``after_sync``); what the GPU time cannot hide stays host work
  between steps (``host_prep``).

:func:`move_host_prep` moves such blocks out of ``after_sync`` and ``launch_wait`` into
``host_prep``, step by step, so the parts still add up.
"""

from __future__ import annotations

import numpy as np

#: A between-steps block not opened by a sync counts as input preparation when it lasts this share of
#: the median step, and at least :data:`MIN_BLOCK_NS`: shorter ones are the loop's own launch pace.
MIN_BLOCK_SHARE = 0.1
MIN_BLOCK_NS = 1_000_000


def move_host_prep(per_step: dict[str, np.ndarray], gaps: tuple[np.ndarray, np.ndarray], tiles: np.ndarray,
                   busy: np.ndarray, load_starts: np.ndarray | None = None) -> None:
    """Add ``per_step["host_prep"]``: the host's blocks of work between launches that the GPU waits through.

    ``gaps`` are the loop GPU's idle intervals (sorted), ``tiles`` each step's GPU interval (they tile
    the loop), ``busy`` the loop's GPU busy time per step. A gap is a block when it lasts
    :data:`MIN_BLOCK_SHARE` of the median step and :data:`MIN_BLOCK_NS`: usually the one between two
    steps (the next batch prepared), wherever the steps' boundary falls. A block moves into
    ``host_prep``, less the time a sync released into it that a step's GPU work could hide (that
    stays ``after_sync``: launching the next step before waiting would hide it), from ``after_sync``
    first, then ``launch_wait``, in the step holding each piece of it. A block that ends in a module
    load (``load_starts``: the launching threads' load calls) was spent building that code (cuDNN's
    runtime fusion for a new shape, a JIT compile), in every step or not: it moves into
    ``module_loading`` instead.
    """
    n = len(tiles)
    prep = np.zeros(n, np.int64)
    per_step["host_prep"] = prep
    gap_s, gap_e = gaps
    if not n or not len(gap_s):
        return
    typical = float(np.median(tiles[:, 1] - tiles[:, 0]))
    blocks = _long_gaps(gap_s, gap_e, max(MIN_BLOCK_SHARE * typical, MIN_BLOCK_NS))
    if not len(blocks):
        return
    bs, be = gap_s[blocks], gap_e[blocks]
    # Each block's pieces in the steps it spans (a block between two steps lies in both).
    first = np.clip(np.searchsorted(tiles[:, 0], bs, side="right") - 1, 0, n - 1)
    last = np.clip(np.searchsorted(tiles[:, 0], be, side="left") - 1, 0, n - 1)
    sync = per_step.get("after_sync", np.zeros(n, np.int64))
    hide = float(np.median(busy)) if len(busy) else 0.0
    loads = np.sort(load_starts) if load_starts is not None and len(load_starts) else np.zeros(0, np.int64)
    compiling = per_step.setdefault("module_loading", np.zeros(n, np.int64))
    for s, e, lo, hi in zip(bs.tolist(), be.tolist(), first.tolist(), last.tolist(), strict=True):
        steps = np.arange(lo, hi + 1)
        pieces = np.maximum(np.minimum(e, tiles[steps, 1]) - np.maximum(s, tiles[steps, 0]), 0)
        total = int(pieces.sum())
        if not total:
            continue
        if len(loads) and np.searchsorted(loads, s, side="left") < np.searchsorted(loads, e, side="right"):
            _take(per_step, compiling, steps, pieces.astype(np.int64))  # the block built the code loaded in it
            continue
        released = int(np.minimum(sync[steps], pieces).sum())
        hidden = int(min(released, hide))
        amount = total - hidden
        if amount <= 0:
            continue
        # The hidden share stays after_sync (launching before the readback recovers it).
        keep = (pieces * hidden // total).astype(np.int64)
        _take(per_step, prep, steps, (pieces * amount // total).astype(np.int64), keep_sync=keep)


#: Gaps measured this many at a time: a long capture has millions of GPU gaps (one between most kernels), and
#: their lengths as one array would be 8 bytes per gap beside the budget's other arrays at its peak.
GAP_CHUNK = 1 << 18


def _long_gaps(gap_s: np.ndarray, gap_e: np.ndarray, threshold: float) -> np.ndarray:
    """Indices of the gaps lasting at least ``threshold`` ns, found a chunk of gaps at a time."""
    found = [np.flatnonzero(gap_e[lo:lo + GAP_CHUNK] - gap_s[lo:lo + GAP_CHUNK] >= threshold) + lo
             for lo in range(0, len(gap_s), GAP_CHUNK)]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _take(per_step: dict[str, np.ndarray], prep: np.ndarray, steps: np.ndarray, amounts: np.ndarray,
          keep_sync: np.ndarray | None = None) -> None:
    """Move up to ``amounts`` of each step's host-bound idle (after_sync beyond ``keep_sync``, then launch_wait)
    into ``prep`` (a part)."""
    ok = amounts > 0
    keep = keep_sync[ok] if keep_sync is not None else np.zeros(int(ok.sum()), np.int64)
    steps, amounts = steps[ok], amounts[ok]
    for name in ("after_sync", "launch_wait"):
        if not len(steps) or name not in per_step:
            continue
        part = per_step[name]
        available = np.maximum(part[steps] - keep, 0) if name == "after_sync" else part[steps]
        taken = np.minimum(amounts, available)
        np.subtract.at(part, steps, taken)
        np.add.at(prep, steps, taken)
        amounts = amounts - taken
        if name == "launch_wait":
            # The launch split (API calls vs own code) loses the moved time from the host's own code.
            for key in ("_launch_host", "_launch_api"):
                if key in per_step:
                    own = np.minimum(taken, per_step[key][steps])
                    np.subtract.at(per_step[key], steps, own)
                    taken = taken - own
