"""Sampled counters split among the kinds of work that ran while they were sampled.

A GPU metric sample (nsys ``--gpu-metrics-devices``) is the counter's average over its period
(100 us at the default 10 kHz), and a period holds several kernels and gaps: a decode step's GEMVs
last 5-40 us each. Averaging the samples over the periods a kind of work touches (weighting each
by the share of its period that work covers) mixes in everything else that ran in those periods:
in an eager decode whose GPU idles 70 % of the time, the GEMVs' 80 % of DRAM peak reads as 26 %.

So the samples are unmixed. Each sample's value is taken as the sum over the kinds of work
(columns) of the share of its period each covers times that kind's own level: ``y = A x``, with
``A`` the N x C matrix of shares (each row adds up to 1 when an idle column is included). Least
squares over thousands of samples, every level held within the counter's range, gives each
kind's level ``x``, with the standard error of the unbounded fit; a kind that covers too little
sampled time, or whose unbounded level comes out impossible (outside the counter's range by more
than its error allows: its time is too entangled with another kind's to tell them apart), is not
reported.

Pure numpy; nothing here knows what a metric or a kernel is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A period longer than this many times the median is a hole in the sampling (a buffer flush, a
#: paused collection), not one sample's period: left out.
MAX_PERIOD_RATIO = 4.0


@dataclass(frozen=True)
class Unmixed:
    """Each column's level (NaN where not resolved), its standard error, and the sampled time it covers."""

    level: np.ndarray
    stderr: np.ndarray
    weight: np.ndarray  # summed shares: how many sample periods' worth of time the column covers
    resolved: np.ndarray  # bool
    rmse: float  # of the fit, in the values' unit
    samples: int

    def __len__(self) -> int:
        return len(self.level)


def sample_periods(time: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The period each sample covers: from its own time to the next sample's (the last has none).

    Returns (starts, ends, index of the sample): holes in the sampling (a period over
    :data:`MAX_PERIOD_RATIO` times the median) are left out. Measured on our H200 captures: a sample
    at ``t`` describes ``[t, next t)`` (its value follows the kernels of that period, correlation
    0.98 against 0.72 for the period before it).
    """
    t = np.asarray(time, np.int64)
    if len(t) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    starts, ends = t[:-1], t[1:]
    length = ends - starts
    median = float(np.median(length))
    keep = (length > 0) & (length <= MAX_PERIOD_RATIO * max(median, 1.0))
    index = np.flatnonzero(keep)
    return starts[keep], ends[keep], index


def weighted_levels(shares: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each column's share-weighted mean of the values (the mixed figure: what unmixing corrects)."""
    weight = shares.sum(axis=0)
    total = shares.T @ values
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight > 0, total / weight, np.nan)


def unmix(shares: np.ndarray, values: np.ndarray, *, min_weight: float = 5.0, low: float = 0.0,
          high: float = 100.0, slack: float = 5.0, max_stderr: float = 5.0,
          keep: np.ndarray | None = None) -> Unmixed:
    """Each column's own level of ``values`` (see the module docstring).

    ``shares``: N x C, the share of each sample's period each column covers. Columns covering fewer
    than ``min_weight`` sample periods are fitted together as one "rest" column (``keep``: columns
    fitted on their own whatever their time, such as idle, the baseline of the others). The levels
    are the least-squares fit with every level, the rest's too, held within [``low``, ``high``]: a
    counter reads no less than nothing, and an unbounded fit lets a small column take an impossible
    level that its neighbours then make up for. A column is resolved when it covers ``min_weight``
    sample periods, its unbounded level lies within the range up to ``max(slack, 3 x its standard
    error)`` (further out, its time is too entangled with another column's to tell them apart), and
    that error is at most ``max_stderr``.
    """
    a = np.asarray(shares, np.float64)
    y = np.asarray(values, np.float64)
    n, c = a.shape if a.ndim == 2 else (len(y), 0)
    weight = a.sum(axis=0) if n else np.zeros(c)
    alone = weight >= min_weight
    if keep is not None:
        alone |= np.asarray(keep, bool) & (weight > 0)
    level = np.full(c, np.nan)
    stderr = np.full(c, np.nan)
    resolved = np.zeros(c, bool)
    cols = np.flatnonzero(alone)
    rest = a[:, ~alone].sum(axis=1) if (~alone).any() else None
    design = a[:, cols] if rest is None or not rest.any() else np.column_stack([a[:, cols], rest])
    if not len(cols) or n <= design.shape[1]:
        return Unmixed(level, stderr, weight, resolved, float("nan"), n)
    free, se, _ = _least_squares(design, y)
    bounded = _bounded(design.T @ design, design.T @ y, low, high, np.clip(free, low, high))
    residual = y - design @ bounded
    rmse = float(np.sqrt(float(residual @ residual) / max(n - design.shape[1], 1)))
    free, se, bounded = free[:len(cols)], se[:len(cols)], bounded[:len(cols)]
    room = np.maximum(slack, 3 * se)
    plausible = (free >= low - room) & (free <= high + room)
    level[cols], stderr[cols] = bounded, se
    resolved[cols] = (weight[cols] >= min_weight) & (se <= max_stderr) & plausible
    return Unmixed(level, stderr, weight, resolved, rmse, n)


def _bounded(gram: np.ndarray, target: np.ndarray, low: float, high: float, start: np.ndarray) -> np.ndarray:
    """Minimize ``x'Gx/2 - target'x`` with every ``x`` in [low, high]: the bounded least squares of the normal
    equations, by coordinate descent (a dozen columns: each sweep is a dozen updates; it converges in a few
    hundred sweeps at most on the captures measured)."""
    x = np.array(start, np.float64)
    diagonal = np.diag(gram)
    scale = max(float(np.abs(x).max(initial=0.0)), 1.0)
    for _ in range(5000):
        moved = 0.0
        for j in range(len(x)):
            if diagonal[j] <= 0:
                continue
            new = min(max(x[j] + (target[j] - float(gram[j] @ x)) / diagonal[j], low), high)
            moved = max(moved, abs(new - x[j]))
            x[j] = new
        if moved <= 1e-9 * scale:
            break
    return x


def _least_squares(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Coefficients, their standard errors and the residual RMS of ``y ~ design``.

    Through the normal equations: the Gram matrix is C x C (a dozen columns), so its pseudo-inverse
    costs nothing, where ``lstsq`` factors the whole N x C design (25 ms for 7,000 samples).
    """
    gram = design.T @ design
    inverse = np.linalg.pinv(gram)
    beta = inverse @ (design.T @ y)
    residual = y - design @ beta
    dof = max(len(y) - design.shape[1], 1)
    sigma2 = float(residual @ residual) / dof
    stderr = np.sqrt(np.maximum(np.diag(inverse) * sigma2, 0.0))
    # Columns that always move together (a kernel that only ever runs beside another) have no level of their own:
    # the pseudo-inverse would split the pair's level between them with a small error. Their error is infinite.
    values, vectors = np.linalg.eigh(gram)
    null = values <= 1e-9 * max(float(values.max()), 1e-300)
    if null.any():
        stderr[(np.abs(vectors[:, null]) > 1e-6).any(axis=1)] = np.inf
    return beta, stderr, float(np.sqrt(sigma2))


def interval_means(starts: np.ndarray, ends: np.ndarray, values: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> np.ndarray:
    """The time-weighted mean of piecewise-constant ``values`` (``values[i]`` over [starts[i], ends[i]), disjoint,
    in order) over each query [lo, hi]; NaN where no sample period overlaps it."""
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    v = np.asarray(values, np.float64)
    if not len(s):
        return np.full(len(lo), np.nan)
    length = (e - s).astype(np.float64)
    area = np.concatenate([[0.0], np.cumsum(v * length)])
    covered = np.concatenate([[0.0], np.cumsum(length)])

    def upto(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = np.asarray(t, np.int64)
        k = np.searchsorted(s, t, side="right")  # periods starting at or before t
        prev = np.maximum(k - 1, 0)
        inside = np.clip(np.minimum(t, e[prev]) - s[prev], 0, None).astype(np.float64)
        inside[k == 0] = 0.0
        before = np.maximum(k - 1, 0)
        a = np.where(k > 0, area[before] + v[prev] * inside, 0.0)
        c = np.where(k > 0, covered[before] + inside, 0.0)
        return a, c

    a_hi, c_hi = upto(hi)
    a_lo, c_lo = upto(lo)
    span = c_hi - c_lo
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(span > 0, (a_hi - a_lo) / span, np.nan)
