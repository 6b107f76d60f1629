"""The launch join: each GPU row and the host API call that launched it.

nsys records a ``correlationId`` on both sides: a GPU row (kernel, copy, memset, graph replay)
belongs to the API call of the same process with the same id. GPU work belongs to a window or a
step by the time of that call, on any thread of the process (the design's launch-time rule).
Every rule, the step model and the stats reports go through these functions; the sorted key
index of a trace's API table is built once per trace.

The keys themselves, and the joins of frames a caller holds, are pure functions in
:mod:`nsys_rules.analysis.keys`; :func:`launching_rows` and :func:`launch_times` join against the
trace's API table.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pandas as pd

from nsys_rules.analysis.keys import find_keys, sorted_keys
from nsys_rules.model.trace import Trace


def launch_times(trace: Trace, gpu: pd.DataFrame, api_rows: np.ndarray | None = None) -> np.ndarray:
    """For each GPU row, the start of the API call that launched it (same pid + correlationId).

    Falls back to the GPU start when no launching call is in the trace (API not traced).
    ``api_rows``, when the join is already known (each row's API row, -1: none), skips it.
    The result is cached per trace and frame (every rule's ``ctx.frame`` asks for it): treat
    it as read-only.
    """
    name = trace.own_frame_name(gpu)
    if name is None:  # only the trace's own frames are kept (a rule's temporary subset would pin memory)
        return _launch_times(trace, gpu, api_rows)

    def build() -> tuple[pd.DataFrame, np.ndarray]:
        result = _launch_times(trace, gpu, api_rows)
        result.flags.writeable = False
        return gpu, result

    # Per table, with the frame kept alongside: a frame read again (more columns) is joined again.
    return trace.memo(("launches.launch_times", name), build, lambda hit: hit[0] is gpu)[1]


def api_key_index(trace: Trace) -> tuple[np.ndarray, np.ndarray | None]:
    """The API table's (pid << 32 | correlationId) keys sorted, and the row order (None: already in order).

    Computed once per trace and shared by every launch join (``launch_times``, rules that need
    the launching call's end or name): a key per API call and a sort, not one per caller.
    """
    api = trace.frame("api", ["start", "correlation_id", "pid"])

    def build() -> tuple[pd.DataFrame, np.ndarray, np.ndarray | None]:
        api_key, order = sorted_keys(api["pid"].to_numpy(), api["correlation_id"].to_numpy())
        api_key.flags.writeable = False
        return api, api_key, order

    _, api_key, order = trace.memo(("launches.api_key_index",), build, lambda hit: hit[0] is api)
    return api_key, order


def launching_rows(trace: Trace, pid: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row of the API frame (``trace.frame("api")``) with the same (pid, correlationId) as each GPU row, and where one is.

    ``rows`` is only meaningful where ``found``. The first matching API row wins.

    One process whose correlation ids rise row by row (the usual nsys export) needs no key array:
    the id column itself is the sorted index, so nothing is built or held for the whole run.
    """
    api = trace.frame("api", ["start", "correlation_id", "pid"])
    single = _single_pid(trace, api)
    if single is not None:
        api_corr = api["correlation_id"].to_numpy()
        rows = np.searchsorted(api_corr, corr)
        np.minimum(rows, len(api_corr) - 1, out=rows)
        found = api_corr[rows] == corr
        found &= corr > 0
        found &= pid == single
        return rows, found
    rows, found = find_keys(*api_key_index(trace), pid, corr)
    found &= corr > 0
    return rows, found


def _single_pid(trace: Trace, api: pd.DataFrame) -> int | None:
    """The API table's one pid when there is one and its correlation ids never decrease; else None."""
    return trace.memo(("launches.single_pid",), lambda: (api, _one_pid(api)), lambda hit: hit[0] is api)[1]


def _one_pid(api: pd.DataFrame) -> int | None:
    """:func:`_single_pid` of the API frame ``api``."""
    pid, corr = api["pid"].to_numpy(), api["correlation_id"].to_numpy()
    single = None
    if len(pid) and corr.dtype.kind in "iu" and int(pid.min()) == int(pid.max()) and \
            (len(corr) < 2 or bool((corr[1:] >= corr[:-1]).all())):
        single = int(pid[0])
    return single


def _launch_times(trace: Trace, gpu: pd.DataFrame, api_rows: np.ndarray | None) -> np.ndarray:
    starts = gpu["start"].to_numpy()
    if not len(gpu) or not trace.has("api") or "correlation_id" not in gpu:
        return starts.copy()
    api_start = trace.frame("api", ["start", "correlation_id", "pid"])["start"].to_numpy()
    if not len(api_start):
        return starts.copy()
    if api_rows is not None:  # the join already known (the GPU activity table's): a gather, not a search per row
        out = np.take(api_start, api_rows, mode="clip")  # -1 reads the first row; replaced just below
        np.copyto(out, starts, where=api_rows < 0)
        return out
    rows, found = launching_rows(trace, gpu["pid"].to_numpy(), gpu["correlation_id"].to_numpy())
    return np.where(found, api_start[rows], starts)


def launch_api_rows(trace: Trace, gpu: pd.DataFrame, names: bool = True, api_rows: np.ndarray | None = None,
                    columns: Iterable[str] | None = None) -> pd.DataFrame:
    """For each GPU row (with ``pid`` and ``correlation_id``), its launching API call.

    Columns ``api_start``, ``api_end`` (-1 where the call is not in the trace) and, with
    ``names``, ``api_name`` (base name, ``_v<digits>`` removed; missing where the call is
    not in the trace) and ``api_raw`` (as nsys stores it), both categorical, aligned with ``gpu``.
    ``columns`` narrows them to those named (each is a row-length gather); it may also name
    ``api_tid``, the calling thread (-1 where the call is not in the trace or its thread is NULL).
    ``api_rows``, when the join is already known (the shared GPU activity table), gives each
    row's API row (-1: none) and skips it.
    """
    wanted = tuple(columns) if columns is not None else (
        ("api_start", "api_end", "api_name", "api_raw") if names else ("api_start", "api_end"))
    n = len(gpu)
    # Only the columns asked for (and the join's keys when it is not given): a rule that declared fewer is
    # not made to read the API table again.
    api_columns = list(dict.fromkeys(_API_COLUMN[c] for c in wanted))
    if api_rows is None:
        api_columns += ["correlation_id", "pid"]
    api = trace.frame("api", api_columns) if n and trace.has("api") else None
    if api is None or not len(api):
        empty = {"api_start": lambda: np.full(n, -1, np.int64), "api_end": lambda: np.full(n, -1, np.int64),
                 "api_tid": lambda: np.full(n, -1, np.int64),
                 "api_name": lambda: np.full(n, None, object), "api_raw": lambda: np.full(n, None, object)}
        return pd.DataFrame({c: empty[c]() for c in wanted}, index=pd.RangeIndex(n))
    if api_rows is not None:
        found = api_rows >= 0
        rows = api_rows
    else:
        # The same join as launch_times (sorted keys shared per trace, or none needed for one process).
        rows, found = launching_rows(trace, gpu["pid"].to_numpy(), gpu["correlation_id"].to_numpy())
    every = bool(found.all())
    if rows.dtype != np.intp and len(wanted) > 1:
        rows = rows.astype(np.intp)  # widened once (a gather widens its index on every call, 8 MB each)
    number_sources: dict[str, Callable[[], np.ndarray]] = {
        "api_start": lambda: api["start"].to_numpy(), "api_end": lambda: api["end"].to_numpy(),
        "api_tid": lambda: _ints(api["tid"])}
    name_sources: dict[str, Callable[[], pd.Series]] = {"api_name": trace.api_names, "api_raw": lambda: api["name"]}
    out: dict[str, object] = {}
    for column in wanted:
        # Names by category code, gathered only for the matched rows: never a Python string per call.
        out[column] = _names_at(name_sources[column](), rows, found, every) if column in name_sources else \
            _at(number_sources[column](), rows, found, every)
    # copy=False: the columns are fresh arrays; a consolidating copy would double them.
    return pd.DataFrame(out, copy=False, index=pd.RangeIndex(n))


#: The API frame's column behind each column :func:`launch_api_rows` can give.
_API_COLUMN = {"api_start": "start", "api_end": "end", "api_tid": "tid", "api_name": "name", "api_raw": "name"}


def _ints(column: pd.Series) -> np.ndarray:
    """An integer column's values, NULL as -1: the loaded array itself where it has no NULLs (a widened copy
    of a 2M-row column of one thread would cost 17 MB)."""
    if isinstance(column.dtype, pd.api.extensions.ExtensionDtype) or column.dtype.kind not in "iu":
        return column.to_numpy(dtype=np.int64, na_value=-1)
    return column.to_numpy()


def _at(values: np.ndarray, rows: np.ndarray, found: np.ndarray, every: bool) -> np.ndarray:
    """``values[rows]``, -1 where not ``found``: one gathered array, patched in place (not a second from np.where).

    Rows not found may hold -1 (the shared join's mark): clipped, then patched.
    """
    if values.strides == (0,) and len(values):
        # One value in every row (loaders.columns.one_value: one process or thread): np.take would first
        # copy the whole zero-stride column into a contiguous one.
        out = np.full(len(rows), values[0], values.dtype)
    else:
        out = np.take(values, rows, mode="clip")
    if not every:
        out[~found] = -1
    return out


def _names_at(names: pd.Series, rows: np.ndarray, found: np.ndarray, every: bool) -> pd.Categorical:
    """``names`` at ``rows`` as a categorical, missing where not ``found`` or NULL.

    Categorical, not an object column: pandas 3 turns an object column of str into an Arrow
    string column on assignment, a conversion per row.
    """
    cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    codes = np.take(cat.array.codes, rows, mode="clip")  # ``.cat.codes`` would copy every code first
    if not every:
        codes[~found] = -1
    return pd.Categorical.from_codes(codes, categories=cat.cat.categories, validate=False)
