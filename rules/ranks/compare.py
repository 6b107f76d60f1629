"""Numbers over the ranks of a job and the words that name them, shared by the job rules (no judgement)."""

from __future__ import annotations

import shlex
import warnings
from pathlib import Path

import numpy as np

from nsys_rules.api import Job, MissingData

#: Past this many ranks, "the others" of a rank are approximated by all ranks (one median per row).
EXACT_OTHERS_UP_TO = 64


def rank_label(job: Job, col: int) -> str:
    """``rank 1 (GPU 1, process 145)``, with the trace's file name when ranks come from several traces."""
    info = job.ranks[col]
    parts = [f"GPU {info.device}" if info.device is not None else "", f"process {info.pid}" if info.pid is not None else ""]
    if len({r.trace for r in job.ranks}) > 1:
        parts.append(Path(info.trace).name)
    inside = ", ".join(p for p in parts if p)
    return f"rank {info.rank}" + (f" ({inside})" if inside else "")


def diff_command(job: Job, slow: int, reference: int) -> str | None:
    """``nsys-rules diff REFERENCE SLOW`` when the two ranks are separate traces, else None."""
    a, b = job.ranks[reference].trace, job.ranks[slow].trace
    if a == b:
        return None
    return f"nsys-rules diff {shlex.quote(a)} {shlex.quote(b)}"


def need_ranks(job: Job, at_least: int = 2) -> None:
    """Skip (MissingData) when the job has fewer ranks than needed for a comparison across ranks."""
    if job.size < at_least:
        raise MissingData(f"the job has {job.size} rank(s): nothing to compare across ranks",
                          "give one trace per rank (`nsys-rules check traces/`, traces captured with "
                          "`nsys profile -o traces/%h_rank%q{RANK}_%n ...`), or one trace of all ranks' processes")


def need_collectives(job: Job) -> None:
    """Skip (MissingData) when no rank has communication kernels."""
    if job.rows.count == 0:
        raise MissingData(f"no communication kernels on any of the {job.size} rank(s): no NCCL or listed custom "
                          "all-reduce kernel, none launched inside an NCCL NVTX range, none that ends together on "
                          "every rank",
                          "capture with `--trace=cuda` (and `--cuda-graph-trace=node` when collectives run inside CUDA "
                          "graphs); a library with its own communication kernels goes into "
                          "nsys_rules/model/job/comm_kernels.toml")


def need_steps(job: Job, at_least: int = 1) -> None:
    """Skip (MissingData) when the collectives give fewer steps than needed."""
    if job.steps.count < at_least:
        raise MissingData(f"{job.rows.count} collective(s) cut {job.steps.count} step(s): too few to judge per step",
                          "capture several steps of the loop (e.g. `nsys profile --capture-range=cudaProfilerApi` "
                          "around 10 or more steps)")


def need_job(job: Job, ranks: int = 1, steps: int = 0) -> None:
    """Skip (MissingData) unless the job has ``ranks`` ranks, communication kernels and ``steps`` steps.

    Checked in that order, so the skip names the first thing missing.
    """
    if ranks > 1:
        need_ranks(job, ranks)
    need_collectives(job)
    if steps:
        need_steps(job, steps)


def full_rows(job: Job) -> np.ndarray:
    """Collectives where every rank meets (coherent, present on all ranks)."""
    return job.coherent & ~np.isnan(job.start).any(axis=1)


def others_median(values: np.ndarray) -> np.ndarray:
    """(C, R): for each row and rank, the median of the *other* ranks' values."""
    n = values.shape[1]
    if n > EXACT_OTHERS_UP_TO:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.repeat(np.nanmedian(values, axis=1, keepdims=True), n, axis=1)
    out = np.full(values.shape, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row where the others have no value stays NaN
        for r in range(n if n > 1 else 0):
            out[:, r] = np.nanmedian(np.delete(values, r, axis=1), axis=1)
    return out


def t_statistic(values: np.ndarray) -> float:
    """How many standard errors the mean of ``values`` lies above 0 (inf when they never vary but are positive)."""
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return 0.0
    mean = float(values.mean())
    sd = float(values.std(ddof=1))
    if sd == 0:
        return float("inf") if mean > 0 else 0.0
    return mean / (sd / np.sqrt(len(values)))


def signed_rank_z(values: np.ndarray) -> float:
    """Wilcoxon signed-rank statistic of ``values`` against 0, as a z score (normal approximation).

    Robust to the heavy tails of arrival delays: a rank late by milliseconds at half the
    collectives and early by microseconds at the others scores high, where a t statistic
    drowns in the variance of the few huge delays. Zeros are dropped; ties get average ranks.
    """
    values = values[np.isfinite(values) & (values != 0)]
    n = len(values)
    if n < 2:
        return 0.0
    order = np.abs(values).argsort(kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(1, n + 1)
    magnitude = np.abs(values)[order]
    # Average ranks over ties (equal magnitudes), as the test defines them.
    _, first, counts = np.unique(magnitude, return_index=True, return_counts=True)
    for f, c in zip(first[counts > 1], counts[counts > 1], strict=True):
        ranks[order[f:f + c]] = ranks[order[f:f + c]].mean()
    positive = float(ranks[values > 0].sum())
    mean = n * (n + 1) / 4
    sd = np.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return (positive - mean) / sd


def worst_first(values: np.ndarray, keep: np.ndarray | None = None, limit: int | None = None) -> np.ndarray:
    """Positions of ``values`` (NaN as 0) from the largest down, ties in position order, among ``keep``, at most ``limit``."""
    vals = np.nan_to_num(values)
    chosen = np.arange(len(vals)) if keep is None else np.flatnonzero(keep)
    return chosen[np.argsort(-vals[chosen], kind="stable")][:limit]


def ms(ns: float) -> str:
    """``1.23 ms``."""
    return f"{ns / 1e6:.2f} ms"
