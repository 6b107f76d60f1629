"""The launch join's keys: pure functions over (pid, correlationId) columns.

nsys records a ``correlationId`` on both sides of a launch: a GPU row belongs to the API call of
the same process with the same id. The join key is :func:`launch_key` (pid in the high 32 bits,
the id in the low ones); :func:`sorted_keys` and :func:`find_keys` join two sides a caller holds,
:func:`launch_pairs` is the stats reports' inner join. The join against a trace's own API table,
built once per trace, is :mod:`nsys_rules.model.launches`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def launch_key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """The join key of each row: ``pid << 32 | correlationId`` (the id's low 32 bits), int64."""
    key = np.left_shift(np.asarray(pid), 32, dtype=np.int64)
    key |= np.bitwise_and(np.asarray(corr), 0xFFFFFFFF, dtype=np.int64)
    return key


def sorted_keys(pid: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows' :func:`launch_key` sorted (stable: equal keys keep row order), and the order (None: already sorted)."""
    key = launch_key(pid, corr)
    # An API table is in call order and correlation ids grow with calls, so its keys are usually
    # sorted already: no argsort then.
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        return key, None
    order = np.argsort(key, kind="stable")
    return key[order], order


def find_keys(sorted_key: np.ndarray, order: np.ndarray | None, pid: np.ndarray, corr: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Row (of the side :func:`sorted_keys` indexed) with the same key as each (pid, corr), and where one is.

    The first matching row wins; ``rows`` is only meaningful where ``found``.
    """
    if not len(sorted_key):
        return np.zeros(len(pid), np.int64), np.zeros(len(pid), bool)
    key = launch_key(pid, corr)
    pos = np.searchsorted(sorted_key, key)
    np.minimum(pos, len(sorted_key) - 1, out=pos)
    found = sorted_key[pos] == key
    del key
    return (pos if order is None else order[pos]), found


def launch_pairs(gpu_pid: np.ndarray, gpu_corr: np.ndarray, api_pid: np.ndarray, api_corr: np.ndarray,
                 null: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (gpu, api) of every GPU row paired with its launching call, as an SQL inner join does.

    Rows whose id is ``null`` (the loader's NULL) join nothing. Where a correlationId repeats
    within a process (odd exports) every match is a pair, as in nsys's own SQL; otherwise each
    GPU row has at most one call.
    """
    gpu_ok = np.flatnonzero(gpu_corr != null)
    api_ok = np.flatnonzero(api_corr != null)
    key, order = sorted_keys(api_pid[api_ok], api_corr[api_ok])
    order = api_ok if order is None else api_ok[order]
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not bool((key[1:] > key[:-1]).all()):
        merged = pd.DataFrame({"key": launch_key(gpu_pid[gpu_ok], gpu_corr[gpu_ok]), "gpu": gpu_ok}).merge(
            pd.DataFrame({"key": launch_key(api_pid[api_ok], api_corr[api_ok]), "api": api_ok}), on="key", how="inner",
            sort=False)
        return merged["gpu"].to_numpy(), merged["api"].to_numpy()
    rows, found = find_keys(key, None, gpu_pid[gpu_ok], gpu_corr[gpu_ok])
    return gpu_ok[found], order[rows[found]]


def keys_rising(pid: np.ndarray, corr: np.ndarray) -> bool:
    """Whether the rows' :func:`launch_key` values strictly rise (so none repeats).

    Read off the ids alone when one process made every call and its ids fit in 32 bits (the
    usual export): no key array (8 MB per million rows).
    """
    if len(corr) < 2:
        return True
    one_pid = pid.strides == (0,) or int(pid.min()) == int(pid.max())
    if one_pid and corr.dtype.kind in "iu" and int(corr.min()) >= 0 and int(corr.max()) <= 0xFFFFFFFF:
        return bool((corr[1:] > corr[:-1]).all())
    key = launch_key(pid, corr)
    return bool((key[1:] > key[:-1]).all())


def first_of_each_call(pid: np.ndarray, corr: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Which GPU rows are the first of their launch call (same pid and correlationId), as a mask.

    First in row order, or by ``start`` when given (stable). A graph launch or a multi-kernel
    call launches several rows at once; only its first is a launch of its own.
    """
    order = None if start is None or len(start) < 2 or bool((start[1:] >= start[:-1]).all()) else \
        np.argsort(start, kind="stable")
    if order is None and keys_rising(pid, corr):  # one row per call, ids rising: no key array, no hashing
        return np.ones(len(corr), bool)
    key = launch_key(pid, corr) if order is None else launch_key(pid[order], corr[order])
    if len(key) < 2 or bool((key[1:] > key[:-1]).all()):  # one row per call, ids rising: no hashing
        return np.ones(len(key), bool)
    first = ~pd.Series(key, copy=False).duplicated(keep="first").to_numpy()
    if order is None:
        return first
    out = np.zeros(len(key), bool)
    out[order[first]] = True
    return out
