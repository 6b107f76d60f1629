"""What the step detectors share: the steps one found (:class:`Found`), where they look (:class:`Bound`),
and the regular runs that make a repeating mark a step (:func:`per_step`, :func:`periodic_run`).

The detectors are in :mod:`.step_nvtx` (a user's NVTX range), :mod:`.step_detectors` (a CUDA graph
launch, a readback or sync once per step), :mod:`.step_calls` and :mod:`.step_period`; the model
that picks among them is :mod:`.steps`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True)
class Found:
    """Steps a detector found: host intervals (n x 2, int64) and what marks them."""

    source: str  # "nvtx", "marker", "graph", "call", "kernels"
    name: str
    host: np.ndarray
    pid: int | None
    note: str = ""


@dataclass(frozen=True)
class Bound:
    """Where steps are looked for, and the tuning that applies everywhere."""

    lo: int
    hi: int
    min_repeats: int = 3
    preferred: tuple[str, ...] = ()


def per_step(ends: np.ndarray, launches: np.ndarray, min_repeats: int, chain: bool = True
             ) -> tuple[np.ndarray, int, int] | None:
    """Step boundaries among a marker's occurrences, occurrences per step, and the launches the steps cover.

    A loop may wait several times per step (a readback for the stop check, another for the
    token): every k-th occurrence ends a step, the one followed by the longest pause (the end of
    its cluster). For each k (1-4) the longest run of steps holding about the same number of
    launches is the loop; the smallest k whose run covers at least 80 % of the best coverage wins
    (merging steps in pairs can always absorb a stray launch or two).
    """
    found: list[tuple[int, int, np.ndarray]] = []  # (coverage, k, boundaries)
    for k in range(1, 5):
        if len(ends) < k * (min_repeats + 1):
            break
        phases = []
        for phase in range(k):
            boundaries = ends[phase::k]
            after = ends[phase + 1::k]
            n = min(len(after), len(boundaries))
            pause = float(np.median(after[:n] - boundaries[:n])) if n else 0.0
            phases.append((pause, phase))
        phase = max(phases)[1] if k > 1 else 0
        boundaries = ends[phase::k]
        counts = np.diff(np.searchsorted(launches, boundaries))
        run = _regular_run(counts, min_repeats, chain)
        if run is None:
            continue
        first, length = run
        found.append((int(counts[first:first + length].sum()), k, boundaries[first:first + length + 1]))
    if not found:
        return None
    top = max(c for c, _, _ in found)
    coverage, k, boundaries = next(f for f in found if f[0] >= 0.8 * top)
    return boundaries, k, coverage


def _regular_run(counts: np.ndarray, min_repeats: int, chain: bool = True) -> tuple[int, int] | None:
    """(first, length) of the run of intervals holding a regular number of launches that covers the most launches.

    Regular: within 25 % of the run's median count. A loop can change pace (a regime of steps that
    autotune or build kernels, then a steady one), so with ``chain`` consecutive regular stretches of
    at least ``min_repeats`` intervals each chain into one run, as long as every interval holds work.
    A weak mark (a bookkeeping call) does not chain: one regular stretch only.
    """
    if len(counts) < min_repeats or not (counts > 0).any():
        return None
    stretches = [(a, b) for a, b in _regular_stretches(counts) if b - a >= min_repeats and counts[a:b].min() > 0]
    if not stretches:
        return None
    chains: list[tuple[int, int]] = []
    for a, b in stretches:
        if chain and chains and chains[-1][1] == a:
            chains[-1] = (chains[-1][0], b)
        else:
            chains.append((a, b))
    first, stop = max(chains, key=lambda c: (int(counts[c[0]:c[1]].sum()), c[1] - c[0]))
    return first, stop - first


def _regular_stretches(counts: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive intervals cut into maximal stretches whose counts stay within 25 % of the stretch's median."""
    out = []
    first, n = 0, len(counts)
    while first < n:
        stop = first + 1
        while stop < n:
            typical = float(np.median(counts[first:stop]))
            if abs(float(counts[stop]) - typical) > 0.25 * max(typical, 1.0):
                break
            stop += 1
        out.append((first, stop))
        first = stop
    return out


def periodic_run(symbols: np.ndarray, min_repeats: int) -> tuple[int, int, int] | None:
    """(period, first position, repetitions) of the longest evenly spaced run of one symbol.

    For each symbol, the most common spacing between its consecutive occurrences and the longest
    run of occurrences at that spacing; the run covering the most of the sequence wins (ties: the
    longer period, i.e. the rarer marker). Initialization kernels repeat evenly too (one weight fill
    per layer), but over a short stretch, so the loop's marker covers more.
    """
    n = len(symbols)
    if not n:
        return None
    order = np.argsort(symbols, kind="stable")  # positions grouped by symbol, each group in order
    sorted_symbols = symbols[order]
    bounds = np.flatnonzero(np.diff(sorted_symbols)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [n]])
    best: tuple[int, int, int, int] | None = None  # (coverage, period, first, repetitions)
    for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
        if hi - lo < min_repeats + 1:
            continue
        positions = order[lo:hi]
        gaps = np.diff(positions)
        values, freq = np.unique(gaps, return_counts=True)
        period = int(values[np.argmax(freq)])
        if period < 1:
            continue
        run_len, run_end = longest_run(gaps == period)
        if run_len < min_repeats:
            continue
        first = int(positions[run_end - run_len])
        candidate = (run_len * period, period, first, run_len)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    return None if best is None else (best[1], best[2], best[3])


def longest_run(flags: np.ndarray) -> tuple[int, int]:
    """Length of the longest run of True and the index one past its end."""
    if not flags.any():
        return 0, 0
    padded = np.concatenate([[False], flags, [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    begins, ends = edges[::2], edges[1::2]
    i = int(np.argmax(ends - begins))
    return int(ends[i] - begins[i]), int(ends[i])
