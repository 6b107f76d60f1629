"""Collective instances across ranks: which kernels communicate, and which instances belong together.

Matching: collectives of one communicator run in the same order on every rank, so the k-th
instance of a collective on one rank is the k-th on the others. Each rank's instances are keyed
by kernel name (and, when a name runs on several streams of a rank, by the stream's order of
first use: one communicator per stream). When the counts differ (a capture window cut at
another moment on each rank), the shift that lines the sequences up best is searched.

Behaviour: a kernel missing from the name list is communication when, matched across ranks
on the job's clock, its instances start at different times but end together: waiting for the
last rank to arrive is what makes a collective, and no compute kernel ends in step on every
rank while starting apart. The clock must come from elsewhere (one trace, the session clocks,
or named collectives): fitted to the candidate's own ends, any rank whose instances run longer
would look like a rank whose clock is off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_rules.model.job.extract import BEHAVIOUR, RankData

#: Largest sequence shift searched when the ranks hold different numbers of a collective.
MAX_SHIFT = 4
#: Behaviour test: the starts of matched instances must spread at least this much (ns) ...
MIN_START_SPREAD_NS = 2_000
#: ... and their ends at most this share of the start spread.
MAX_END_TO_START_SPREAD = 0.25
#: Instances needed on each of two ranks before the behaviour test says anything.
MIN_BEHAVIOUR_MATCHES = 3


@dataclass(frozen=True)
class Rows:
    """Matched collective instances: ``index[c, r]`` is rank r's instance of collective c (-1: none)."""

    keys: list[str]  # the key of each distinct collective (name, maybe with a stream ordinal)
    key: np.ndarray  # (C,) index into ``keys``
    index: np.ndarray  # (C, R) int64

    @property
    def count(self) -> int:
        """Number of matched collective instances."""
        return int(len(self.key))


def instance_keys(rank: RankData) -> np.ndarray:
    """Per instance, its collective key: the name, plus ``#n`` for its name's n-th stream when there are several."""
    names = np.asarray(rank.names, dtype=object)[rank.code] if rank.instances else np.empty(0, dtype=object)
    out = names.copy()
    for code in np.unique(rank.code):
        mask = rank.code == code
        streams = rank.stream[mask]
        if len(np.unique(streams)) < 2:
            continue
        _, first = np.unique(streams, return_index=True)
        ordinal = {int(s): i for i, s in enumerate(streams[np.sort(first)])}
        out[mask] = [f"{rank.names[code]}#{ordinal[int(s)]}" for s in streams]
    return out


def match(ranks: list[RankData], keys_per_rank: list[np.ndarray], approx_offset: np.ndarray) -> Rows:
    """Line up the instances of every key across ranks (see the module docstring).

    ``approx_offset[r]`` brings rank r's timestamps to a common clock (the session clocks), used
    only to choose a shift when the counts differ.
    """
    all_keys = sorted({str(k) for keys in keys_per_rank for k in keys})
    key_rows: list[np.ndarray] = []
    index_rows: list[np.ndarray] = []
    for k, key in enumerate(all_keys):
        members = {r: np.flatnonzero(keys == key) for r, keys in enumerate(keys_per_rank)}
        members = {r: m for r, m in members.items() if len(m)}
        ref = max(members, key=lambda r: (len(members[r]), -r))
        ref_end = ranks[ref].end[members[ref]] + approx_offset[ref]
        table = np.full((len(members[ref]), len(ranks)), -1, np.int64)
        table[:, ref] = members[ref]
        for r, mine in members.items():
            if r == ref:
                continue
            shift = _best_shift(ref_end, ranks[r].end[mine] + approx_offset[r]) if len(mine) != len(members[ref]) else 0
            positions = np.arange(len(mine)) + shift
            ok = (positions >= 0) & (positions < len(table))
            table[positions[ok], r] = mine[ok]
        key_rows.append(np.full(len(table), k, np.int64))
        index_rows.append(table)
    if not key_rows:
        return Rows([], np.zeros(0, np.int64), np.zeros((0, len(ranks)), np.int64))
    return Rows(all_keys, np.concatenate(key_rows), np.concatenate(index_rows))


def _best_shift(ref_end: np.ndarray, other_end: np.ndarray) -> int:
    """Shift s (other[j] pairs with ref[j + s]) whose end differences agree best, nearest the common clock."""
    best: tuple[float, float, int] | None = None
    for shift in range(-MAX_SHIFT, MAX_SHIFT + 1):
        j = np.arange(len(other_end))
        ok = (j + shift >= 0) & (j + shift < len(ref_end))
        if ok.sum() < 2:
            continue
        diff = other_end[ok] - ref_end[j[ok] + shift]
        centre = float(np.median(diff))
        spread = float(np.median(np.abs(diff - centre)))
        score = (spread, abs(centre), shift)
        if best is None or score < best:
            best = score
    return 0 if best is None else best[2]


def behaviour_confirmed(ranks: list[RankData], rows: Rows, keys_per_rank: list[np.ndarray],
                        offset: np.ndarray) -> set[str]:
    """Keys of behaviour candidates that start apart but end together on every rank that has them.

    ``offset[r]`` puts rank r on the job clock (see the module docstring for why it may not come
    from the candidates themselves).
    """
    confirmed: set[str] = set()
    candidate_keys = {str(k) for r, keys in enumerate(keys_per_rank) for k, fam in zip(
        keys, _families(ranks[r]), strict=True) if fam == BEHAVIOUR}
    for key in sorted(candidate_keys):
        sel = rows.index[rows.key == rows.keys.index(key)] if key in rows.keys else np.zeros((0, len(ranks)), np.int64)
        start, end = _times(ranks, sel, offset)
        both = (~np.isnan(end)).sum(axis=0) >= MIN_BEHAVIOUR_MATCHES
        if both.sum() < 2:
            continue
        start, end = start[:, both], end[:, both]
        full = ~np.isnan(end).any(axis=1)
        if full.sum() < MIN_BEHAVIOUR_MATCHES:
            continue
        start, end = start[full], end[full]
        start_spread = float(np.median(start.max(axis=1) - start.min(axis=1)))
        end_spread = float(np.median(end.max(axis=1) - end.min(axis=1)))
        if start_spread >= MIN_START_SPREAD_NS and end_spread <= MAX_END_TO_START_SPREAD * start_spread:
            confirmed.add(key)
    return confirmed


def _families(rank: RankData) -> np.ndarray:
    return np.asarray(rank.families, dtype=object)[rank.code] if rank.instances else np.empty(0, dtype=object)


def _times(ranks: list[RankData], index: np.ndarray, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) as float ns on the common clock for each matched row and rank; NaN where missing."""
    start = np.full(index.shape, np.nan)
    end = np.full(index.shape, np.nan)
    for r, rank in enumerate(ranks):
        have = index[:, r] >= 0
        start[have, r] = rank.start[index[have, r]] + offset[r]
        end[have, r] = rank.end[index[have, r]] + offset[r]
    return start, end


def times(ranks: list[RankData], rows: Rows, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every matched instance on the job clock (``offset[r]`` added), NaN where missing."""
    return _times(ranks, rows.index, offset)
