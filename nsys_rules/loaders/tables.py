"""The canonical tables of the trace model and where each column comes from.

This is the allow-list of the schema: the loader only ever names tables and columns
listed here (quoted), never anything taken from the file or the command line.
A column lists candidate source columns because the export schema drifted across
nsys versions; the first one present wins.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One canonical column.

    ``kind`` says how the raw value becomes the canonical one: ``int`` (int64, or a
    nullable integer when the source has NULLs), ``string`` (a ``StringIds`` reference
    resolved to a categorical name), ``text`` (a TEXT column, categorical), ``pid`` /
    ``tid`` (decoded from a serialized ``globalPid``/``globalTid``), ``blob`` (raw bytes, an
    object array of ``bytes`` or None: NVTX extended payloads).
    """

    name: str
    sources: tuple[str, ...]
    kind: str = "int"
    required: bool = False


@dataclass(frozen=True)
class RowDrop:
    """Rows of a source table that are not rows of the canonical one: ``column`` holds one of ``values``.

    Checked only when the export also has table ``only_with`` (the one sign such rows can exist), so
    other exports never pay for reading ``column``.
    """

    column: str
    values: tuple[int, ...]
    only_with: str


@dataclass(frozen=True)
class Table:
    """A canonical table: its source table(s) in the export and its columns."""

    name: str
    sources: tuple[str, ...]
    columns: tuple[Column, ...]
    capture_hint: str
    drop_rows: RowDrop | None = None

    def column(self, name: str) -> Column:
        """The column called ``name``; ``KeyError`` when the table has none."""
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    @property
    def column_names(self) -> tuple[str, ...]:
        """Every canonical column name, in order."""
        return tuple(c.name for c in self.columns)


def _c(name: str, *sources: str, kind: str = "int", required: bool = False) -> Column:
    return Column(name, sources or (name,), kind, required)


_GPU_COMMON = (
    _c("start", required=True),
    _c("end", required=True),
    _c("device_id", "deviceId"),
    _c("context_id", "contextId"),
    _c("stream_id", "streamId"),
    _c("correlation_id", "correlationId"),
    _c("pid", "globalPid", kind="pid"),
    _c("graph_node_id", "graphNodeId"),
)

#: ``eventClass`` of the rows ``--cudabacktrace`` adds to CUPTI_ACTIVITY_KIND_RUNTIME (see the ``api`` table).
CUDA_BACKTRACE_CLASS = 67
#: Source columns of raw bytes: kept as ``bytes``, never decoded as text (Parquet/Arrow exports type them as
#: strings that hold any bytes).
BLOB_SOURCES = frozenset({"binaryData"})

_CUDA_HINT = "capture with `nsys profile --trace=cuda` (CUDA trace was off or the program ran no CUDA work)"

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table(
            "kernels",
            ("CUPTI_ACTIVITY_KIND_KERNEL",),
            _GPU_COMMON
            + (
                _c("name", "demangledName", kind="string"),
                _c("short_name", "shortName", kind="string"),
                _c("mangled_name", "mangledName", kind="string"),  # stats `:mangled`; absent before nsys 2021
                _c("grid_x", "gridX"), _c("grid_y", "gridY"), _c("grid_z", "gridZ"),
                _c("block_x", "blockX"), _c("block_y", "blockY"), _c("block_z", "blockZ"),
                _c("registers_per_thread", "registersPerThread"),
                _c("static_shared_memory", "staticSharedMemory"),
                _c("dynamic_shared_memory", "dynamicSharedMemory"),
                _c("local_memory_total", "localMemoryTotal"),
                _c("launch_type", "launchType"),
            ),
            _CUDA_HINT,
        ),
        Table(
            "api",
            ("CUPTI_ACTIVITY_KIND_RUNTIME",),
            (
                _c("start", required=True),
                _c("end", required=True),
                _c("correlation_id", "correlationId"),
                _c("pid", "globalTid", kind="pid"),
                _c("tid", "globalTid", kind="tid"),
                _c("name", "nameId", kind="string", required=True),
                _c("return_value", "returnValue"),
            ),
            _CUDA_HINT,
            # `--cudabacktrace` writes a second row for each call it took a backtrace of (eventClass 67,
            # TRACE_PROCESS_EVENT_CUDABACKTRACE): the same call's interval and correlationId again,
            # carrying the stack (callchainId into CUDA_CALLCHAINS). It is no call of its own.
            drop_rows=RowDrop("eventClass", (CUDA_BACKTRACE_CLASS,), "CUDA_CALLCHAINS"),
        ),
        Table(
            "memcpy",
            ("CUPTI_ACTIVITY_KIND_MEMCPY",),
            _GPU_COMMON
            + (
                _c("bytes"),
                _c("copy_kind", "copyKind"),
                _c("src_kind", "srcKind"),
                _c("dst_kind", "dstKind"),
                _c("src_device_id", "srcDeviceId"),
                _c("dst_device_id", "dstDeviceId"),
            ),
            _CUDA_HINT,
        ),
        Table(
            "memset",
            ("CUPTI_ACTIVITY_KIND_MEMSET",),
            _GPU_COMMON + (_c("bytes"), _c("mem_kind", "memKind"), _c("value")),
            _CUDA_HINT,
        ),
        Table(
            "sync",
            ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",),
            (
                _c("start", required=True),
                _c("end", required=True),
                _c("device_id", "deviceId"),
                _c("context_id", "contextId"),
                _c("stream_id", "streamId"),
                _c("correlation_id", "correlationId"),
                _c("pid", "globalPid", kind="pid"),
                _c("sync_type", "syncType"),
                _c("event_id", "eventId"),
            ),
            _CUDA_HINT,
        ),
        Table(
            "nvtx",
            ("NVTX_EVENTS",),
            (
                _c("start", required=True),
                _c("end"),
                # `end` as stored: NULL_INT for a range still open at the end of the capture
                # (`end` itself is patched to `start`); nvtx_sum runs those to the last timestamp.
                _c("raw_end", "end"),
                _c("event_type", "eventType"),
                # Registered strings live in StringIds (textId), others inline (text).
                _c("name", "text", "textId", kind="nvtx_name"),
                _c("pid", "globalTid", kind="pid"),
                _c("tid", "globalTid", kind="tid"),
                _c("end_tid", "endGlobalTid", kind="tid"),
                _c("domain_id", "domainId"),
                _c("range_id", "rangeId"),
                # NVTX extended payloads (Python stacks, NCCL details): written only by
                # `nsys export --include-blobs=true`, NULL otherwise.
                _c("payload", "binaryData", kind="blob"),
            ),
            "annotate the program with NVTX ranges and capture with `nsys profile --trace=cuda,nvtx`",
        ),
        Table(
            "graph_trace",
            ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE",),
            (
                _c("start", required=True),
                _c("end", required=True),
                _c("device_id", "deviceId"),
                _c("stream_id", "streamId"),
                _c("correlation_id", "correlationId"),
                _c("pid", "globalPid", kind="pid"),
                _c("graph_id", "graphId"),
                _c("graph_exec_id", "graphExecId"),
            ),
            "capture CUDA graphs with `nsys profile --cuda-graph-trace=graph` (nsys >= 2023.3)",
        ),
        Table(
            "memory_usage",
            ("CUDA_GPU_MEMORY_USAGE_EVENTS",),
            (
                _c("start", required=True),
                _c("pid", "globalPid", kind="pid"),
                _c("device_id", "deviceId"),
                _c("bytes"),
                _c("memory_kind", "memKind"),
                _c("operation", "memoryOperationType"),
                _c("address"),
            ),
            "capture with `nsys profile --cuda-memory-usage=true`",
        ),
        Table(
            "osrt",
            ("OSRT_API",),
            (
                _c("start", required=True),
                _c("end", required=True),
                _c("pid", "globalTid", kind="pid"),
                _c("tid", "globalTid", kind="tid"),
                _c("name", "nameId", kind="string", required=True),
            ),
            # What a host thread did outside CUDA: waiting on another thread (futex, pthread_cond_wait),
            # on a file or a socket (read, poll). Read only when a rule asks why the host was busy.
            "capture with `nsys profile --trace=cuda,nvtx,osrt` (OS runtime calls were not traced)",
        ),
        Table(
            "overhead",
            ("PROFILER_OVERHEAD",),
            (
                _c("start", required=True),
                _c("end", required=True),
                _c("pid", "globalTid", kind="pid"),
                _c("tid", "globalTid", kind="tid"),
                _c("name", "nameId", kind="string"),
            ),
            "re-export with a newer nsys (profiler overhead rows are missing)",
        ),
    )
}
