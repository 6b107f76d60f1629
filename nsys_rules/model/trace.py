"""The normalized trace model: canonical frames plus what the export says about the capture.

Frames are loaded lazily and only with the columns asked for; times are int64 ns and
names are categoricals resolved from ``StringIds``. A table the export lacks is an empty
frame with ``has(name)`` False, never an error.
"""

from __future__ import annotations

import os
import dataclasses
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

import numpy as np
import pandas as pd

from nsys_rules.errors import InputError
from nsys_rules.loaders.export import MAX_DEVICE_ID, Export, ReadMeter
from nsys_rules.loaders.tables import TABLES
from nsys_rules.malloc_tune import release_free_memory
from nsys_rules.model.memo import Memo, MemoKey
from nsys_rules.textsafe import shell_join

#: Row count of the second-biggest table from which preload reads tables in parallel threads.
PARALLEL_LOAD_ROWS = 200_000

_VERSION_SUFFIX = re.compile(r"_v\d+$")

T = TypeVar("T")


def base_api_name(name: str) -> str:
    """The API name with any ``_v<digits>`` suffix removed (``cuMemcpyDtoHAsync_v2`` -> ``cuMemcpyDtoHAsync``)."""
    return _VERSION_SUFFIX.sub("", name)


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of the capture host, keyed by the kernels' ``deviceId``."""

    id: int
    name: str
    sm_count: int | None = None
    memory_bandwidth: int | None = None  # bytes per second; None when the export lacks it
    clock_hz: int | None = None
    total_memory: int | None = None
    #: (major, minor), e.g. (9, 0) for Hopper; None when the export does not record it.
    compute_capability: tuple[int, int] | None = None


@dataclass(frozen=True)
class CaptureInfo:
    """How the trace was captured, as far as the export records it."""

    graph_trace_mode: str | None = None  # "Graph", "Node" or None when unrecorded
    traced: tuple[str, ...] = ()  # CAPTURE_EVENT_TYPE values, e.g. ("Cuda", "NvtxEvents")
    command: tuple[str, ...] = ()  # program and arguments of the first profiled process
    working_dir: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)  # every META_DATA_CAPTURE row, last wins

    @property
    def command_line(self) -> str:
        """The profiled command as one shell-quoted line (every word quoted: the file chose them)."""
        return shell_join(self.command)

    @property
    def runs_python(self) -> bool:
        """Whether the profiled program is a Python interpreter (advice then names the Python way)."""
        return bool(self.command) and "python" in self.command[0].rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ExportInfo:
    """Which nsys wrote the export, and its export schema version."""

    nsys_version: str | None = None
    schema_version: str | None = None
    #: For exports without export metadata (nsys before 2022.1): the version range the table
    #: shapes point to, e.g. "2021.2-2021.5 by table shapes"; None when the metadata names the version.
    inferred: str | None = None


class Trace:
    """One nsys export, normalized.

    ``frame(name, columns)`` returns a canonical frame (see :mod:`nsys_rules.loaders.tables`);
    frames are cached, so rules that share a table share one read.
    """

    def __init__(self, export: Export, label: str | None = None) -> None:
        self.export = export
        self.path: Path = export.path
        self.label = label or str(export.path)
        self._frames: dict[str, pd.DataFrame] = {}
        # Every fact built from this trace (the model's, the rule context's), kept for the trace's lifetime.
        self._memo = Memo()
        self.gpus: dict[int, GpuInfo] = _read_gpus(export)
        self.capture: CaptureInfo = _read_capture(export)
        self.export_info: ExportInfo = _read_export_info(export)

    @property
    def meter(self) -> ReadMeter | None:
        """The memory guard every read is priced against, given to the export when the trace was opened."""
        return self.export.meter


    # -- capabilities ----------------------------------------------------------------------
    def has(self, name: str) -> bool:
        """True when the export has a usable source table for canonical table ``name``."""
        return self.export.source_of(TABLES[name]) is not None

    def row_count(self, name: str) -> int:
        """Rows of canonical table ``name`` in the file (0 when absent), without loading it."""
        source = self.export.source_of(TABLES[name])
        return self.export.count(source) if source else 0

    @property
    def tables_present(self) -> tuple[str, ...]:
        """Canonical tables the export can provide."""
        return tuple(name for name in TABLES if self.has(name))

    @property
    def damage(self) -> list[str]:
        """What the loader had to drop or patch, one line each."""
        return self.export.damage

    # -- frames ----------------------------------------------------------------------------
    def frame(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """Canonical frame ``name`` with at least ``columns`` (all when None)."""
        table = TABLES[name]
        wanted = list(columns) if columns is not None else list(table.column_names)
        cached = self._frames.get(name)
        if cached is not None and all(c in cached.columns for c in wanted):
            return cached
        have = list(cached.columns) if cached is not None else []
        columns = list(dict.fromkeys(have + wanted))
        if self.export.meter is not None:
            self.export.meter.admit(self.export, name, columns)  # exit 3 before a read that cannot fit
        frame = self.export.read(table, columns)
        self._frames[name] = frame
        return frame

    def own_frame_name(self, frame: pd.DataFrame) -> str | None:
        """The canonical name of ``frame`` when it is the trace's own cached frame of that table (by identity);
        None for any other frame (a rule's subset, a frame the trace has since replaced)."""
        # list(): a snapshot, since another thread's read may add a frame meanwhile.
        return next((name for name, own in list(self._frames.items()) if own is frame), None)

    def memo(self, key: MemoKey, build: Callable[[], T], fresh: Callable[[T], bool] | None = None) -> T:
        """The fact kept under ``key`` for this trace, built by ``build()`` at most once, even when several
        threads ask at once (:class:`nsys_rules.model.memo.Memo`).

        ``key`` is a tuple: the fact's module-qualified name (``"steps.step_model"``), then its arguments.
        ``fresh``, for a fact built from a frame the trace may replace, says whether a kept value still
        holds; one it refuses is built again.
        """
        return self._memo.get(key, build, fresh)

    def memo_peek(self, key: MemoKey) -> object | None:
        """The fact kept under ``key`` if it is built already; None otherwise (builds nothing)."""
        return self._memo.peek(key)

    def preload(self, needs: Mapping[str, Iterable[str]]) -> None:
        """Read every table in ``needs`` once with the union of its columns.

        Big SQLite tables are read two at a time: the Arrow reader steps SQLite without holding
        the GIL, so the kernel and API tables of a 1M-kernel trace load in parallel on two cores.
        Exports whose reads are cheap (``parallel_reads`` False: Parquet, Arrow) are read one
        table at a time, since two reads in flight would add their transients to the peak.
        """
        items = [(name, list(cols)) for name, cols in needs.items()]
        sizes = {name: self.row_count(name) for name, _ in items} if len(items) > 1 else {}
        if (len(items) < 2 or sorted(sizes.values())[-2] < PARALLEL_LOAD_ROWS or (os.cpu_count() or 1) < 2
                or not getattr(self.export, "parallel_reads", True)):
            for name, cols in items:
                self.frame(name, cols)
            return
        items.sort(key=lambda item: -sizes[item[0]])  # biggest first, so the two big reads overlap
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="nsys-rules-load") as pool:
            # list() re-raises the first failure (InputError, MemoryError) as a serial read would.
            list(pool.map(lambda item: self.frame(item[0], item[1]), items))
        release_free_memory()  # the batches' pages the readers' allocators kept

    def api_names(self) -> pd.Series:
        """Base API names (``_v<digits>`` removed) of the api frame, aligned with its rows."""
        api = self.frame("api", ["name"])
        # Every rule asks; built once per API frame.
        return self.memo(("trace.api_names",), lambda: (api, self._base_names(api)), lambda hit: hit[0] is api)[1]

    @staticmethod
    def _base_names(api: pd.DataFrame) -> pd.Series:
        """:meth:`api_names` of the API frame ``api``."""
        cats = api["name"].cat.categories
        mapped = pd.Index([base_api_name(str(c)) for c in cats], dtype=object)
        codes, uniq = pd.factorize(mapped)
        raw = api["name"].cat.codes.to_numpy()
        lookup = np.append(codes, -1)  # index -1 (NULL name) maps to -1
        return pd.Series(pd.Categorical.from_codes(lookup[raw], categories=uniq), index=api.index)

    def gpu(self, device_id: int) -> GpuInfo | None:
        """The GPU whose id is the kernels' ``deviceId``."""
        return self.gpus.get(int(device_id))

    def close(self) -> None:
        """Release the file (and the folder of an export made for this run: the export's own)."""
        self._frames.clear()
        self._memo.clear()
        self.export.close()


def _int_or_none(value: Any) -> int | None:
    """A metadata cell (whatever the export stores: int, float, text, a numpy scalar) as int; None when empty or not one."""
    try:
        return int(value) if value is not None and str(value).strip() != "" else None
    except (TypeError, ValueError):
        return None


def _read_gpus(export: Export) -> dict[int, GpuInfo]:
    gpus: dict[int, GpuInfo] = {}
    cols = export.columns_of("TARGET_INFO_GPU")
    id_col = "id" if "id" in cols else ("deviceId" if "deviceId" in cols else None)
    if id_col is not None:
        for row in _by_id(export.rows("TARGET_INFO_GPU", [id_col, "name", "smCount", "memoryBandwidth", "clockRate",
                                                           "totalMemory"])):
            gid = _int_or_none(row[0])
            if gid is not None:
                gpus[gid] = _gpu(export, "TARGET_INFO_GPU", gid, row)
        if "computeMajor" in cols and "computeMinor" in cols:
            for gid, major, minor in export.rows("TARGET_INFO_GPU", [id_col, "computeMajor", "computeMinor"]):
                key, major, minor = _int_or_none(gid), _int_or_none(major), _int_or_none(minor)
                if key in gpus and major is not None and minor is not None and 0 < major < 100 and 0 <= minor < 100:
                    gpus[key] = dataclasses.replace(gpus[key], compute_capability=(major, minor))
    if not gpus and "deviceId" in export.columns_of("TARGET_INFO_CUDA_GPU"):
        # 2020-2021 exports: the GPU table had other names and bandwidth in bytes/s.
        for row in _by_id(export.rows("TARGET_INFO_CUDA_GPU", ["deviceId", "name", "numMultiprocessors",
                                                                "globalMemoryBandwidth", "coreClockRate",
                                                                "globalMemorySize"])):
            gid = _int_or_none(row[0])
            if gid is not None:
                gpus[gid] = _gpu(export, "TARGET_INFO_CUDA_GPU", gid, row)
    return gpus


def _by_id(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """GPU rows in device order (stable): exports from nsys 2025.6 on may store them in any order, and the damage
    notes they raise must not follow it."""
    return sorted(rows, key=lambda row: (_int_or_none(row[0]) is None, _int_or_none(row[0]) or 0))


def _gpu(export: Export, table: str, gid: int, row: tuple[object, ...]) -> GpuInfo:
    """One GPU; a spec that is not a positive number is unknown (and noted as damage), never used as a number."""
    if not 0 <= gid < MAX_DEVICE_ID:
        export.damage.append(f"{table}: GPU id {gid} is no device index (at or beyond {MAX_DEVICE_ID:,}, or negative)")
    specs: list[int | None] = []
    for label, raw in zip(("SM count", "memory bandwidth", "clock rate", "memory size"), row[2:6], strict=True):
        value = _int_or_none(raw)
        if value is not None and value <= 0:
            export.damage.append(f"{table}: GPU {gid} {label} {value} is not a positive number; treated as unknown")
            value = None
        specs.append(value)
    sm_count, bandwidth, clock_hz, total_memory = specs
    return GpuInfo(gid, str(row[1] or "unknown GPU")[:256], sm_count, bandwidth, clock_hz, total_memory)


#: Traced kinds kept from ``META_DATA_CAPTURE`` (nsys writes about a dozen), and the characters kept of each.
MAX_TRACED = 64
MAX_TRACED_NAME = 256


def _meta_rows(export: Export, table: str) -> list[tuple[str, str]]:
    cols = export.columns_of(table)
    if "name" not in cols or "value" not in cols:
        return []
    return [(str(n), "" if v is None else str(v)) for n, v in export.rows(table, ["name", "value"])]


def _read_capture(export: Export) -> CaptureInfo:
    rows = _meta_rows(export, "META_DATA_CAPTURE")
    options: dict[str, str] = {}
    traced: list[str] = []
    env: dict[str, str] = {}
    args: dict[int, str] = {}
    for name, value in rows:
        options[name] = value
        if name == "CAPTURE_EVENT_TYPE":
            # Each kind once, a few dozen at most: a planted table repeating one value 100,000 times must not
            # become a report of 100,000 copies (nsys writes each traced kind once, short names).
            if value not in traced and len(traced) < MAX_TRACED:
                traced.append(value[:MAX_TRACED_NAME])
        elif name == "PROCESS_0:ENVIRONMENT_VARIABLE" and "=" in value:
            key, _, val = value.partition("=")
            env[key] = val[1:-1] if len(val) >= 2 and val[0] == val[-1] == '"' else val
        elif name.startswith("PROCESS_0:ARGUMENT_"):
            index = _int_or_none(name.rsplit("_", 1)[-1])
            if index is not None:
                args[index] = value
    command = tuple([options["PROCESS_0:COMMAND"]] if options.get("PROCESS_0:COMMAND") else []) + tuple(
        args[i] for i in sorted(args))
    mode = options.get("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE") or None
    # Sorted: exports from nsys 2025.6 on may store the rows in any order, and the report must not follow it.
    return CaptureInfo(mode, tuple(sorted(traced)), command, options.get("PROCESS_0:WORKING_DIR"), env, options)


def _read_export_info(export: Export) -> ExportInfo:
    rows = dict(_meta_rows(export, "META_DATA_EXPORT") or _meta_rows(export, "EXPORT_META_DATA"))
    version = rows.get("EXPORT_PRODUCT_VERSION") or rows.get("NSYS_VERSION") or None
    schema = rows.get("EXPORT_SCHEMA_VERSION")
    if not schema and rows.get("EXPORT_SCHEMA_VERSION_MAJOR"):
        schema = ".".join(rows.get(f"EXPORT_SCHEMA_VERSION_{p}", "0") for p in ("MAJOR", "MINOR", "MICRO"))
    return ExportInfo(version, schema or None, None if version else _infer_era(export))


def _infer_era(export: Export) -> str:
    """The nsys versions an export without metadata can come from, by its table shapes.

    nsys wrote no export metadata table before 2022.1 (EXPORT_META_DATA, then META_DATA_EXPORT
    from 2023.3). Seen in exports of 2020.3-2021.5: 2020.3 had only TARGET_INFO_CUDA_GPU;
    2020.5 added TARGET_INFO_GPU (name and bus only, details still in TARGET_INFO_CUDA_GPU);
    2021.2 moved smCount, clocks and bandwidth into TARGET_INFO_GPU.
    """
    # The injection library's install path often leaks into StringIds (".../nsight-systems/2021.2.1/...").
    try:
        values = export.strings_containing("nsight-systems", 50) if "value" in export.columns_of("StringIds") else []
    except InputError:  # a damaged StringIds is the loader's to report, not a reason to refuse here
        values = []
    for value in values:
        found = _INSTALL_PATH.search(value)
        if found:
            return f"{found.group(1)} by the nsys install path in StringIds"
    gpu_cols = export.columns_of("TARGET_INFO_GPU")
    if "smCount" in gpu_cols:
        return "2021.2-2021.5 by table shapes"
    if gpu_cols:
        return "2020.5-2021.x by table shapes"
    if export.columns_of("TARGET_INFO_CUDA_GPU"):
        return "2020.4 or older by table shapes"
    return "older than 2022.1: no export metadata"


_INSTALL_PATH = re.compile(r"nsight-systems[-/](20\d\d\.\d+(?:\.\d+)*)")
