"""Regimes of a step series: runs of consecutive steps whose times differ by a change point, not by noise.

A loop can change pace in the middle of a capture: the first 63 tokens of an eager decode build a
new cuDNN attention plan each (50-75 ms a step), the next 63 reuse them (15 ms); a torch.compile
loop recompiles for a new shape and then runs faster or slower. One median over both runs is a
step time no step has. :func:`regimes` cuts a series of step durations where its level jumps and
stays: binary segmentation on the log durations (each cut the one that leaves the least squared
deviation on its two sides), a cut kept only when

- both sides hold at least :data:`MIN_RUN` steps (and a tenth of the series),
- their medians differ by at least :data:`MIN_RATIO`,
- the sides barely overlap (at least :data:`MIN_ORDERED` of all cross pairs are ordered the same
  way, a rank statistic: one slow step among fast ones does not move it), and
- the jump is abrupt: the few steps on each side of the cut differ by at least half of the
  whole difference (a KV cache that grows step by step makes a ramp, which is no regime).
"""

from __future__ import annotations

import numpy as np

#: Fewest steps a regime holds (fewer slow steps are outliers, not a regime).
MIN_RUN = 5
#: Ratio of the two sides' median step times for a cut.
MIN_RATIO = 1.5
#: Share of (left, right) step pairs ordered as the medians are.
MIN_ORDERED = 0.9
#: Steps on each side of a cut that show the jump.
LOCAL = 3


def regimes(durations: np.ndarray, max_cuts: int = 3) -> list[tuple[int, int]]:
    """``[(first, stop), ...]``: the regimes of ``durations`` in order, covering it (one run when there is no cut)."""
    values = np.asarray(durations, dtype=float)
    n = len(values)
    if n < 2 * MIN_RUN:
        return [(0, n)] if n else []
    logs = np.log(np.maximum(values, 1.0))
    min_run = max(MIN_RUN, n // 10)
    cuts: list[int] = []
    pending = [(0, n)]
    while pending and len(cuts) < max_cuts:
        lo, hi = pending.pop()
        found = _split(logs, lo, hi, min_run)
        cuts += found
        bounds = [lo, *found, hi]
        pending += list(zip(bounds[:-1], bounds[1:], strict=True)) if found else []
    bounds = [0, *sorted(cuts), n]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _split(logs: np.ndarray, lo: int, hi: int, min_run: int) -> list[int]:
    """Cuts of ``logs[lo:hi]``: the best single cut if it passes, else the best middle run (two cuts).

    A run of slow steps in the middle (a recompile burst between two steady stretches) has no
    single cut that separates it: each side of any one cut mixes the regimes.
    """
    if hi - lo < 2 * min_run:
        return []
    cut = _least_squares_cut(logs[lo:hi], min_run) + lo
    if _passes(logs, lo, cut, hi):
        return [cut]
    if hi - lo < 3 * min_run:
        return []
    a, b = _least_squares_pair(logs[lo:hi], min_run)
    a, b = a + lo, b + lo
    return [a, b] if _passes(logs, lo, a, b) and _passes(logs, a, b, hi) else []


def _passes(logs: np.ndarray, lo: int, cut: int, hi: int) -> bool:
    """Whether ``cut`` separates ``logs[lo:cut]`` and ``logs[cut:hi]`` as two regimes (the module's tests)."""
    left, right = logs[lo:cut], logs[cut:hi]
    gap = float(np.median(right)) - float(np.median(left))
    if abs(gap) < np.log(MIN_RATIO):
        return False
    sign = 1.0 if gap > 0 else -1.0
    if float(np.mean(sign * (right[None, :] - left[:, None]) > 0)) < MIN_ORDERED:
        return False
    k = min(LOCAL, len(left), len(right))
    local = float(np.median(right[:k])) - float(np.median(left[-k:]))
    return sign * local >= 0.5 * abs(gap)


def _least_squares_cut(values: np.ndarray, min_run: int) -> int:
    """The cut leaving the least squared deviation from each side's mean (cumulative sums: one pass)."""
    n = len(values)
    total, squares = np.cumsum(values), np.cumsum(values * values)
    k = np.arange(min_run, n - min_run + 1)
    left_sum, left_sq = total[k - 1], squares[k - 1]
    right_sum, right_sq = total[-1] - left_sum, squares[-1] - left_sq
    cost = (left_sq - left_sum ** 2 / k) + (right_sq - right_sum ** 2 / (n - k))
    return int(k[np.argmin(cost)])


def _least_squares_pair(values: np.ndarray, min_run: int) -> tuple[int, int]:
    """The two cuts leaving the least squared deviation on their three sides (each side ``min_run`` long)."""
    n = len(values)
    total = np.concatenate([[0.0], np.cumsum(values)])
    squares = np.concatenate([[0.0], np.cumsum(values * values)])

    def sse(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # squared deviation of values[a:b]
        s, q = total[b] - total[a], squares[b] - squares[a]
        return q - s * s / (b - a)

    best = (np.inf, min_run, 2 * min_run)
    stride = max(1, n // 300)  # a long series: every stride-th first cut (a few hundred rows of numpy)
    for a in range(min_run, n - 2 * min_run + 1, stride):
        b = np.arange(a + min_run, n - min_run + 1)
        cost = sse(np.zeros_like(b), np.full_like(b, a)) + sse(np.full_like(b, a), b) + sse(b, np.full_like(b, n))
        i = int(np.argmin(cost))
        if cost[i] < best[0]:
            best = (float(cost[i]), a, int(b[i]))
    return best[1], best[2]


def steady_regime(runs: list[tuple[int, int]], min_steps: int) -> int:
    """Index of the regime that is the steady state: the last long one.

    Long: at least ``min_steps`` steps and a quarter of all of them (a loop that settles late, the
    decode after its plan-building tokens). When no late run is that long, the longest run is the
    loop's usual pace and the rest are its phases.
    """
    total = sum(stop - first for first, stop in runs)
    for i in range(len(runs) - 1, -1, -1):
        first, stop = runs[i]
        if stop - first >= max(min_steps, total / 4):
            return i
    return max(range(len(runs)), key=lambda i: runs[i][1] - runs[i][0])
