"""One clock for the whole job.

Each trace counts time from its own session start; ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``
puts that start on the host's wall clock, so ``utcEpochNs + timestamp`` is a common time for
every trace, as good as the hosts' clocks agree. Ranks inside one trace share its clock exactly.

The collectives check it: one collective instance ends within microseconds on every rank
(the last rank's arrival releases them all). Where a trace's session clock puts its ends
further than :data:`TOLERANCE_NS` from the others', the median difference over all shared
collectives replaces it. What is left afterwards, the typical distance of a rank's collective
ends from the other ranks', is reported as the residual skew.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

#: Session clocks that put collective ends further apart than this (median) are corrected.
TOLERANCE_NS = 50_000
#: Shared collective instances needed to estimate a correction.
MIN_SHARED = 3


@dataclass(frozen=True)
class Clock:
    """How the traces' clocks were put on one timeline."""

    offset: np.ndarray  # per rank: add to its timestamps to get job time (ns)
    session_offset: np.ndarray  # per rank: what the session clocks alone gave
    correction: np.ndarray  # per rank: what the collectives changed (offset - session_offset)
    residual_ns: np.ndarray  # per rank: median |its collective end - the median end of that collective|
    source: str  # "one trace", "session clocks", "session clocks corrected from collectives", ...
    notes: tuple[str, ...] = ()

    @property
    def residual_skew_ns(self) -> float:
        """The worst rank's residual (0 with one rank)."""
        finite = self.residual_ns[np.isfinite(self.residual_ns)]
        return float(finite.max()) if len(finite) else 0.0


def session_offsets(bases: list[int], session_starts: list[int | None]) -> tuple[np.ndarray, list[str], bool]:
    """Per rank, its session start minus the earliest one; notes; and whether that is a real clock.

    One trace is one clock (True); traces without ``TARGET_INFO_SESSION_START_TIME`` get 0 and False.
    """
    notes: list[str] = []
    known = [s for s in session_starts if s is not None]
    if len(set(bases)) == 1:
        return np.zeros(len(bases), np.int64), notes, True
    if len(known) < len(session_starts):
        notes.append("some traces lack TARGET_INFO_SESSION_START_TIME: their clocks come from the collectives alone")
        return np.zeros(len(bases), np.int64), notes, False
    origin = min(known)
    return np.array([int(s) - origin for s in known], np.int64), notes, True


def align(bases: list[int], session: np.ndarray, end: np.ndarray, trusted: np.ndarray | None = None) -> Clock:
    """Put every rank on one clock.

    ``bases[r]`` names rank r's trace (ranks of one trace share a clock); ``session`` are the
    session offsets; ``end`` is (collectives, ranks) of collective end times on each rank's own
    clock (NaN where a rank lacks one); ``trusted`` marks the collectives whose ends agree across
    ranks (default all).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # collectives a trace lacks are NaN: empty means are expected
        return _align(bases, session, end, trusted)


def _align(bases: list[int], session: np.ndarray, end: np.ndarray, trusted: np.ndarray | None) -> Clock:
    n = len(bases)
    offset = session.astype(np.int64).copy()
    notes: list[str] = []
    rows = end if trusted is None else end[trusted]
    distinct = sorted(set(bases))
    corrected = False
    if len(distinct) > 1 and len(rows):
        # The reference is the trace sharing the most collectives with the others.
        shared = {b: int((~np.isnan(rows[:, [r for r in range(n) if bases[r] == b]])).any(axis=1).sum()) for b in distinct}
        ref = max(distinct, key=lambda b: (shared[b], -b))
        ref_cols = [r for r in range(n) if bases[r] == ref]
        ref_end = np.nanmean(_on(rows[:, ref_cols], offset[ref_cols]), axis=1) if ref_cols else np.full(len(rows), np.nan)
        for b in distinct:
            if b == ref:
                continue
            cols = [r for r in range(n) if bases[r] == b]
            mine = np.nanmean(_on(rows[:, cols], offset[cols]), axis=1)
            diff = mine - ref_end
            diff = diff[np.isfinite(diff)]
            if len(diff) < MIN_SHARED:
                notes.append(f"{len(cols)} rank(s) share fewer than {MIN_SHARED} collectives with the others: "
                             "their clock is the session clock alone")
                continue
            delta = float(np.median(diff))
            if abs(delta) > TOLERANCE_NS:
                offset[cols] -= int(round(delta))
                corrected = True
    residual = _residual(_on(rows, offset)) if len(rows) else np.full(n, np.nan)
    if len(distinct) == 1:
        source = "one trace (one clock)"
    elif corrected:
        source = "session clocks corrected from collectives"
    elif session.any():
        source = "session clocks (checked against collectives)"
    else:
        source = "trace timestamps (checked against collectives)"
    return Clock(offset, session.astype(np.int64), offset - session, residual, source, tuple(notes))


def _on(end: np.ndarray, offset: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return end + offset[np.newaxis, :].astype(float)


def _residual(end: np.ndarray) -> np.ndarray:
    """Per rank, the median distance of its collective ends from each collective's median end."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        counts = (~np.isnan(end)).sum(axis=1)
        rows = end[counts >= 2]
        if not len(rows):
            return np.full(end.shape[1], np.nan)
        centre = np.nanmedian(rows, axis=1)
        dist = np.abs(rows - centre[:, np.newaxis])
        out = np.full(end.shape[1], np.nan)
        for r in range(end.shape[1]):
            col = dist[:, r]
            col = col[np.isfinite(col)]
            if len(col):
                out[r] = float(np.median(col))
    return out
