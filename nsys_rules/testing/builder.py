"""Test helpers for rule and plugin authors.

:class:`TraceBuilder` writes a real nsys-schema SQLite file (the tables and columns the
loader reads, with ``StringIds``, GPU info and capture metadata), so a test builds the
exact scenario it needs and runs the same code path as a real trace::

    b = TraceBuilder(command=["target/release/server"])
    for step in range(10):
        b.nvtx("decode_step", step * 1_000_000, step * 1_000_000 + 900_000)
        b.kernel("gemv_kernel", start=step * 1_000_000 + 10_000, duration=50_000)
    findings = run_rule("kernel-tail", b.write(tmp_path / "t.sqlite"))

:func:`~nsys_rules.testing.running.run_rule` (:mod:`.running`) runs a rule on it. Every row method
takes its arguments in one order: the name (when the row has one), the start, then the duration
(ns); an NVTX range takes its end instead, since a mark (``end=None``) has none. Older exports:
``TraceBuilder(legacy_metadata=True)`` (nsys 2022.1-2023.2 metadata) or ``write_metadata=False``
(before 2022.1). This module is public API for plugin authors (see docs/plugins.md).
"""

from __future__ import annotations

import html
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import nsys_rules.testing.payloads as payloads
from nsys_rules.testing.schema import EXPORT_DDL

PID = 4242
MAIN_TID = 4242
VM_BITS = 1 << 48  # nsys stores a VM id above the pid/tid bits of a serialized global id

#: nsys's names of the GPU metrics a Hopper GPU samples (``--gpu-metrics-devices``), by the short keys
#: :meth:`TraceBuilder.sample_gpu_metrics` takes; ``GPU_METRIC_ORDER`` is nsys's metricId order.
GPU_METRIC_NAMES = {"gpc_clock": "GPC Clock Frequency [MHz]", "sys_clock": "SYS Clock Frequency [MHz]",
                    "gr_active": "GR Active [Throughput %]", "sm_active": "SMs Active [Throughput %]",
                    "sm_issue": "SM Issue [Throughput %]", "tensor_active": "Tensor Active [Throughput %]",
                    "dram_read": "DRAM Read Bandwidth [Throughput %]", "dram_write": "DRAM Write Bandwidth [Throughput %]",
                    "pcie_rx": "PCIe RX Throughput [Throughput %]", "pcie_tx": "PCIe TX Throughput [Throughput %]"}
GPU_METRIC_ORDER = tuple(GPU_METRIC_NAMES.values())
#: The GPU metrics' event type and source as nsys serializes them (``typeId`` = this | the GPU's index).
GPU_METRICS_TYPE = VM_BITS | (1 << 32)

MEMCPY_KINDS = {"HtoD": 1, "DtoH": 2, "DtoD": 8, "HtoH": 9, "PtoP": 10}
MEMORY_KINDS = {"pageable": 0, "pinned": 1, "device": 2, "array": 3, "managed": 4}
SYNC_TYPES = {"event": 1, "stream_wait_event": 2, "stream": 3, "context": 4}

@dataclass(frozen=True)
class GpuSpec:
    """A GPU row of ``TARGET_INFO_GPU``; the defaults describe an H200."""

    id: int = 0
    name: str = "NVIDIA H200"
    memory_bandwidth: int | None = 4_814_304_000_000
    sm_count: int = 132
    clock_hz: int = 1_980_000_000
    total_memory: int = 150_109_880_320
    compute_capability: tuple[int, int] = (9, 0)


@dataclass
class TraceBuilder:
    """Builds an nsys SQLite export row by row.

    Times are ns. Every GPU operation gets a launching API call (same correlationId) that
    starts ``launch_lead`` ns before it unless ``launch_at`` is given. Tables nobody
    added rows to are not written, as nsys does not write empty tables.
    """

    command: Iterable[str] = ("target/release/app",)
    environment: Mapping[str, str] = field(default_factory=dict)
    gpus: Iterable[GpuSpec] = (GpuSpec(),)
    graph_trace_mode: str | None = "Node"
    nsys_version: str = "2025.3.2.0"
    schema_version: str = "3.20.3"
    launch_lead: int = 5_000
    launch_duration: int = 3_000
    write_metadata: bool = True
    #: Write metadata the way nsys 2022.1-2023.2 did: ``EXPORT_META_DATA`` instead of
    #: ``META_DATA_EXPORT``, and no ``META_DATA_CAPTURE`` (capture options unrecorded).
    legacy_metadata: bool = False
    #: UTC epoch ns of the capture start (TARGET_INFO_SESSION_START_TIME); None writes no such table.
    session_start_utc_ns: int | None = None
    #: GPU metrics sampling frequency recorded in the capture options when samples are written (Hz).
    gpu_metrics_frequency: int = 10_000
    #: Python stacks (``python_sample``, ``python_backtrace``) with their payloads, as ``nsys export
    #: --include-blobs=true`` writes them; False: ``binaryData`` NULL, as a plain export leaves it.
    include_blobs: bool = True
    _rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict, init=False)
    _python_domains: set[int] = field(default_factory=set, init=False)
    _callchains: int = field(default=0, init=False)
    _strings: dict[str, int] = field(default_factory=dict, init=False)
    _corr: int = field(default=0, init=False)
    _metric_ids: dict[tuple[int, str], int] = field(default_factory=dict, init=False)

    # -- primitives --------------------------------------------------------------------------
    def string(self, value: str) -> int:
        """Id of ``value`` in StringIds (added on first use)."""
        if value not in self._strings:
            self._strings[value] = len(self._strings) + 1
        return self._strings[value]

    def _add(self, table: str, row: tuple[Any, ...]) -> None:
        self._rows.setdefault(table, []).append(row)

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    @staticmethod
    def global_tid(tid: int = MAIN_TID, pid: int = PID) -> int:
        """Serialized global thread id, as nsys stores it."""
        return VM_BITS | (pid << 24) | tid

    @staticmethod
    def global_pid(pid: int = PID) -> int:
        """Serialized global process id."""
        return VM_BITS | (pid << 24)

    # -- host side ---------------------------------------------------------------------------
    def api(self, name: str, start: int, duration: int = 1_000, *, tid: int = MAIN_TID, pid: int = PID,
            correlation_id: int | None = None, return_value: int = 0, cuda_backtrace: bool = False,
            python_stack: Sequence[tuple[str, str, int]] | None = None) -> int:
        """A CUDA runtime or driver API call (``name`` as nsys stores it, e.g. ``cudaMalloc_v3020``).

        ``cuda_backtrace``: nsys took a backtrace of it (``--cudabacktrace``): a second row of the call,
        eventClass 67, 1 us wider, with a ``CUDA_CALLCHAINS`` stack. ``python_stack`` (function, file,
        line; innermost first): its Python backtrace too (``--python-backtrace=cuda``), a mark at the
        start of that row.
        """
        corr = self._next_corr() if correlation_id is None else correlation_id
        self._add("CUPTI_ACTIVITY_KIND_RUNTIME", (start, start + duration, 1, self.global_tid(tid, pid), corr,
                                                  self.string(name), return_value, None))
        if cuda_backtrace or python_stack is not None:
            chain = self._callchains
            self._callchains += 1
            self._add("CUPTI_ACTIVITY_KIND_RUNTIME", (start - 1_000, start + duration + 200, 67,
                                                      self.global_tid(tid, pid), corr,
                                                      self.string(re.sub(r"_v\d+$", "", name)), 0, chain))
            self._add("CUDA_CALLCHAINS", (chain, self.string(re.sub(r"_v\d+$", "", name)), self.string("libcudart.so"),
                                          None, 0, 0))
            if python_stack is not None:
                self.python_backtrace(start - 1_000, python_stack, tid=tid, pid=pid)
        return corr

    # -- Python stacks (nsys --python-sampling=true, --python-backtrace=cuda) ------------------------
    def python_sample(self, start: int, frames: Sequence[tuple[str, str, int]], *, tid: int = MAIN_TID,
                      pid: int = PID, state: int = payloads.RUNNING) -> None:
        """A periodic Python sample of thread ``tid``: ``frames`` as (function, file, line), innermost first."""
        self._python_mark(payloads.SAMPLING_DOMAIN, payloads.SAMPLING_SCHEMA_ID, start, frames, tid, pid, state)

    def python_backtrace(self, start: int, frames: Sequence[tuple[str, str, int]], *, tid: int = MAIN_TID,
                         pid: int = PID, state: int = payloads.RUNNING) -> None:
        """The Python stack nsys takes at a CUDA call (``api(..., python_stack=...)`` places it at the call)."""
        self._python_mark(payloads.BACKTRACE_DOMAIN, payloads.BACKTRACE_SCHEMA_ID, start, frames, tid, pid, state)

    def _python_mark(self, domain: int, schema: int, start: int, frames: Sequence[tuple[str, str, int]], tid: int,
                     pid: int, state: int) -> None:
        # nsys stores the names HTML-escaped: "<module>" as "&lt;module&gt;".
        ids = [(self.string(html.escape(f, quote=False)), self.string(html.escape(file, quote=False)), int(line))
               for f, file, line in frames]
        blob = payloads.encode_stack(schema, state, ids) if self.include_blobs else None
        self._python_domains.add(domain)
        self._add("NVTX_EVENTS", (start, None, 34, None, None, None, None, self.global_tid(tid, pid), None, None, domain,
                                  None, None, None, None, None, None, None, None, blob))

    def nvtx(self, name: str, start: int, end: int | None = None, *, duration: int | None = None,
             tid: int = MAIN_TID, pid: int = PID, registered: bool = False, domain: int = 0,
             process_wide: bool = False) -> None:
        """An NVTX push/pop range from ``start`` to ``end`` (or ``start + duration``); neither: a mark.

        ``registered`` stores the name in StringIds. ``process_wide`` writes a start/end range
        (``nvtxRangeStartA``/``nvtxRangeEnd``, eventType 60) instead: not bound to the thread that
        opened it.
        """
        if duration is not None:
            if end is not None:
                raise TypeError("nvtx(): give end or duration, not both")
            end = start + duration
        text, text_id = (None, self.string(name)) if registered else (name, None)
        event_type = 34 if end is None else (60 if process_wide else 59)
        end_tid = self.global_tid(tid, pid) if process_wide and end is not None else None
        self._add("NVTX_EVENTS", (start, end, event_type, None, None, None, text, self.global_tid(tid, pid), end_tid,
                                  text_id, domain, None, None, None, None, None, None, None, None, None))

    def profiler_start(self, start: int, *, driver: bool = False) -> None:
        """The ``cudaProfilerStart`` call that a ``-c cudaProfilerApi`` capture begins with."""
        self.api("cuProfilerStart" if driver else "cudaProfilerStart_v4000", start, 2_000)

    # -- GPU side ----------------------------------------------------------------------------
    def _launch(self, api_name: str | None, start: int, launch_at: int | None, tid: int, pid: int) -> int:
        if api_name is None:
            return self._next_corr()
        at = start - self.launch_lead if launch_at is None else launch_at
        return self.api(api_name, at, self.launch_duration, tid=tid, pid=pid)

    def kernel(self, name: str, start: int, duration: int, *, grid: tuple[int, int, int] = (1, 1, 1),
               block: tuple[int, int, int] = (128, 1, 1), short_name: str | None = None, device: int = 0,
               stream: int = 7, api: str | None = "cudaLaunchKernel_v7000", launch_at: int | None = None,
               tid: int = MAIN_TID, pid: int = PID, graph_node_id: int | None = None, registers: int = 32,
               correlation_id: int | None = None) -> int:
        """A kernel and the API call that launched it; returns its correlationId.

        With ``correlation_id`` the kernel belongs to an existing call (a node of a graph replayed
        by :meth:`graph_launch` with ``traced_as_graph=False``): no API row is added.
        """
        corr = correlation_id if correlation_id is not None else self._launch(api, start, launch_at, tid, pid)
        short = short_name or name.split("(")[0].split("<")[0].split("::")[-1]
        self._add("CUPTI_ACTIVITY_KIND_KERNEL", (
            start, start + duration, device, 1, None, stream, corr, self.global_pid(pid), self.string(name),
            self.string(short), None, 1, 0, registers, *grid, *block, 0, 0, 0, 0, corr, 0, graph_node_id, None))
        return corr

    def memcpy(self, start: int, duration: int, nbytes: int, *, kind: str = "HtoD", src: str = "pinned",
               dst: str = "device", device: int = 0, stream: int = 7, api: str | None = "cudaMemcpyAsync_v3020",
               launch_at: int | None = None, tid: int = MAIN_TID, pid: int = PID) -> int:
        """A memcpy (``kind`` HtoD/DtoH/DtoD/HtoH/PtoP, memory kinds pageable/pinned/device/managed)."""
        corr = self._launch(api, start, launch_at, tid, pid)
        self._add("CUPTI_ACTIVITY_KIND_MEMCPY", (
            start, start + duration, device, 1, None, stream, corr, self.global_pid(pid), nbytes, MEMCPY_KINDS[kind],
            None, MEMORY_KINDS[src], MEMORY_KINDS[dst], device, 1, device, 1, None, None, None, 1))
        return corr

    def memset(self, start: int, duration: int, nbytes: int, *, memory: str = "device", device: int = 0,
               stream: int = 7, api: str | None = "cudaMemsetAsync_v3020", launch_at: int | None = None,
               tid: int = MAIN_TID, pid: int = PID) -> int:
        """A memset on ``memory`` (device/pinned/managed/...)."""
        corr = self._launch(api, start, launch_at, tid, pid)
        self._add("CUPTI_ACTIVITY_KIND_MEMSET", (start, start + duration, device, 1, None, stream, corr,
                                                 self.global_pid(pid), 0, nbytes, None, MEMORY_KINDS[memory]))
        return corr

    def sync(self, start: int, duration: int, *, kind: str = "stream", api: str = "cudaStreamSynchronize_v3020",
             device: int = 0, stream: int = 7, tid: int = MAIN_TID, pid: int = PID) -> int:
        """A blocking synchronization: the API call and its SYNCHRONIZATION row, over the same interval."""
        corr = self.api(api, start, duration, tid=tid, pid=pid)
        self._add("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", (start, start + duration, device, 1, None, stream, corr,
                                                          self.global_pid(pid), SYNC_TYPES[kind], 0))
        return corr

    def graph_launch(self, start: int, duration: int, *, graph_id: int = 1, exec_id: int = 1, device: int = 0,
                     stream: int = 7, api: str = "cudaGraphLaunch_v10000", launch_at: int | None = None,
                     tid: int = MAIN_TID, pid: int = PID, traced_as_graph: bool = True) -> int:
        """A graph replay: the launch call and, when ``traced_as_graph``, its GRAPH_TRACE row."""
        corr = self._launch(api, start, launch_at, tid, pid)
        if traced_as_graph:
            self._add("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", (start, start + duration, device, 1, None, stream, corr,
                                                          self.global_pid(pid), graph_id, exec_id))
        return corr

    def memory_event(self, start: int, nbytes: int, *, allocate: bool = True, device: int = 0, address: int = 0,
                     pid: int = PID) -> None:
        """A ``--cuda-memory-usage`` allocation (or free) event."""
        self._add("CUDA_GPU_MEMORY_USAGE_EVENTS", (start, self.global_pid(pid), device, 1, address, 0, nbytes, 2,
                                                   0 if allocate else 1, None, 0, None))

    def osrt(self, name: str, start: int, duration: int, *, tid: int = MAIN_TID, pid: int = PID) -> None:
        """An OS runtime call (``--trace=osrt``): ``futex``, ``pthread_cond_wait``, ``poll``, ``read``, ..."""
        self._add("OSRT_API", (start, start + duration, 27, self.global_tid(tid, pid), self.string(name), 0, 0, 0))

    def overhead(self, name: str, start: int, duration: int, *, tid: int = MAIN_TID) -> None:
        """A profiler-overhead interval (``name`` as nsys writes it, e.g. ``CUDA profiling data flush``)."""
        if not isinstance(name, str):
            raise TypeError("overhead(name, start, duration): the name comes first, as in every TraceBuilder row")
        self._add("PROFILER_OVERHEAD", (start, start + duration, self.global_tid(tid), self.string(name), 0))

    # -- GPU metrics (--gpu-metrics-devices) --------------------------------------------------
    def gpu_metric(self, name: str, start: int, value: int, *, gpu: int = 0) -> None:
        """One sample of GPU metric ``name`` (nsys's name, or a key of :data:`GPU_METRIC_NAMES`) of GPU ``gpu`` at
        ``start``: the metric's average over the period up to its next sample."""
        name = GPU_METRIC_NAMES.get(name, name)
        key = (gpu, name)
        if key not in self._metric_ids:
            self._metric_ids[key] = sum(1 for g, _ in self._metric_ids if g == gpu)
            self._add("TARGET_INFO_GPU_METRICS", (GPU_METRICS_TYPE | gpu, GPU_METRICS_TYPE | gpu, "",
                                                  self._metric_ids[key], name))
        self._add("GPU_METRICS", (start, start, GPU_METRICS_TYPE | gpu, self._metric_ids[key], int(value)))

    def sample_gpu_metrics(self, levels: Mapping[str, Mapping[str, float]], start: int, end: int, *,
                           period: int = 100_000, idle: Mapping[str, float] | None = None, gpu: int = 0,
                           metrics: Iterable[str] | None = None) -> None:
        """Samples every ``period`` ns from ``start`` to ``end`` as the GPU would report them for the kernels added so
        far: each sample is the time-weighted mix, over its period, of the ``levels`` of the kernels that ran
        (kernel name -> {metric: percent}), ``idle`` levels where none ran, 0 for a kernel not in ``levels``;
        rounded to whole percents as nsys stores them. ``metrics``: the metric keys or names to write (default:
        every one named in ``levels`` and ``idle``)."""
        names = {v: k for k, v in self._strings.items()}
        kernels = [(r[0], r[1], names.get(r[8], "")) for r in self._rows.get("CUPTI_ACTIVITY_KIND_KERNEL", [])
                   if r[2] == gpu]
        idle = dict(idle or {})
        wanted = list(dict.fromkeys(metrics if metrics is not None else
                                    [m for lv in [*levels.values(), idle] for m in lv]))
        for t in range(start, end, period):
            stop = t + period
            busy = 0
            mix = dict.fromkeys(wanted, 0.0)
            for k_start, k_end, kernel in kernels:
                overlap = min(k_end, stop) - max(k_start, t)
                if overlap <= 0:
                    continue
                busy += overlap
                for metric_name, level in levels.get(kernel, {}).items():
                    if metric_name in mix:
                        mix[metric_name] += level * overlap
            for metric_name in wanted:
                value = (mix[metric_name] + idle.get(metric_name, 0.0) * max(period - busy, 0)) / period
                self.gpu_metric(metric_name, t, round(value), gpu=gpu)

    # -- output ------------------------------------------------------------------------------
    def _metadata(self) -> None:
        if not self.write_metadata:
            return
        rows: list[tuple[str, str]] = [("CAPTURE_EVENT_TYPE", "Cuda"), ("CAPTURE_EVENT_TYPE", "NvtxEvents")]
        command = list(self.command)
        if command:
            rows.append(("PROCESS_0:COMMAND", command[0]))
            rows += [(f"PROCESS_0:ARGUMENT_{i}", a) for i, a in enumerate(command[1:])]
        rows += [("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in self.environment.items()]
        if self.graph_trace_mode:
            rows.append(("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", self.graph_trace_mode))
        gpus = sorted({g for g, _ in self._metric_ids})
        if gpus:
            rows.append(("GPU_METRICS_OPTIONS:SAMPLING_FREQUENCY", str(self.gpu_metrics_frequency)))
            rows += [(f"GPU_METRICS_OPTIONS:GPU_{i}:ID", str(g)) for i, g in enumerate(gpus)]
        if not self.legacy_metadata:
            self._rows["META_DATA_CAPTURE"] = rows
        major, minor, micro = (self.schema_version.split(".") + ["0", "0"])[:3]
        self._rows["EXPORT_META_DATA" if self.legacy_metadata else "META_DATA_EXPORT"] = [
            ("EXPORT_PRODUCT_VERSION", self.nsys_version), ("EXPORT_SCHEMA_VERSION", self.schema_version),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
            ("EXPORT_SCHEMA_VERSION_MICRO", micro)]
        self._rows["TARGET_INFO_GPU"] = [
            (VM_BITS, g.id, g.name, f"0000:00:{g.id:02x}.0", 1, 50_331_648, g.total_memory, g.memory_bandwidth,
             g.clock_hz, g.sm_count, "GH100", *g.compute_capability) for g in self.gpus]
        self._rows["ThreadNames"] = [(self.string("main"), 0, self.global_tid())]
        if self.session_start_utc_ns is not None:
            self._rows["TARGET_INFO_SESSION_START_TIME"] = [(self.session_start_utc_ns, None, None, None)]

    def write(self, path: str | Path) -> Path:
        """Write the export to ``path`` (replaced if it exists) and return the path."""
        path = Path(path)
        if path.exists():
            path.unlink()
        self._metadata()
        tables = dict(self._rows)
        if self._python_domains:  # the schemas and NVTX domains nsys registers for Python stacks
            tables.update(NVTX_PAYLOAD_SCHEMAS=payloads.SCHEMA_ROWS, NVTX_PAYLOAD_SCHEMA_ENTRIES=payloads.ENTRY_ROWS,
                          NVTX_PAYLOAD_ENUMS=payloads.ENUM_ROWS, NVTX_PAYLOAD_ENUM_ENTRIES=payloads.ENUM_ENTRY_ROWS)
            tables["NVTX_EVENTS"] = [(0, None, 75, None, None, None, text, self.global_tid(), None, None, domain,
                                      *([None] * 9)) for domain, text in payloads.DOMAINS] + tables.get("NVTX_EVENTS", [])
        db = sqlite3.connect(path)
        try:
            db.execute(f"CREATE TABLE StringIds ({EXPORT_DDL['StringIds']})")
            db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self._strings.items()])
            for table, rows in tables.items():
                if not rows:
                    continue
                db.execute(f"CREATE TABLE {table} ({EXPORT_DDL[table]})")
                marks = ", ".join("?" * len(rows[0]))
                db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            db.commit()
        finally:
            db.close()
        return path
