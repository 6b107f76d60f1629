"""Names the analysis recognizes: CUDA API calls by what they do, and NVTX ranges that libraries emit.

All API names are *base* names (``_v<digits>`` removed, see :func:`nsys_rules.model.trace.base_api_name`).
This module is data: extend a set here and every rule and the step model see it.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from nsys_rules.malloc_tune import CHUNK_ROWS as _CHUNK
from nsys_rules.analysis.spliced import Spliced

#: Calls that launch one kernel each (runtime and driver, the legacy ``cudaLaunch`` and
#: ``cuLaunchGrid*`` included: they launch one kernel like the rest). Kernels launched by a graph
#: launch are not here: they share their launch call with the rest of the graph.
KERNEL_LAUNCH_APIS = frozenset({
    "cudaLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernelMultiDevice", "cuLaunchGrid", "cuLaunchGridAsync",
})

#: Calls that replay a whole CUDA graph (its kernels and copies share the call's correlationId).
GRAPH_LAUNCH_APIS = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})

#: Every call whose GPU work lands in the kernel table (one kernel or a whole graph): a trace with
#: such calls and no kernel rows lost its GPU activity.
ANY_KERNEL_LAUNCH_APIS = KERNEL_LAUNCH_APIS | GRAPH_LAUNCH_APIS

#: Host calls whose duration is the GPU's, not the host's: they wait for queued work (syncs,
#: synchronous copies and memsets, queries, profiler range calls, cross-stream waits), so their
#: spread is the GPU's schedule, not a host-side tail. Matched with ``re.search``.
WAITING_API_PATTERN = re.compile(
    r"Synchronize|cudaMemcpy$|cudaMemcpy2D$|cudaMemcpy3D$|cuMemcpy(DtoH|HtoD|DtoD)?$|"
    r"cudaMemcpyToSymbol$|cudaMemcpyFromSymbol$|cudaMemset$|cuMemsetD\d+$|cudaEventQuery|"
    r"cudaStreamQuery|cudaProfilerStart|cudaProfilerStop|cuProfilerStart|cuProfilerStop|"
    r"cudaStreamWaitEvent|cuStreamWaitEvent")


def is_waiting_call(name: str) -> bool:
    """Whether a call's duration is time spent waiting for the GPU (:data:`WAITING_API_PATTERN`)."""
    return bool(WAITING_API_PATTERN.search(name))


def is_blocking_transfer(name: str) -> bool:
    """A synchronous copy or memset call: the host waits for the GPU inside it."""
    return name.startswith(("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")) and "Async" not in name


def is_any_launch(name: str) -> bool:
    """A launch call of any kind (kernel, graph, host function): such a call blocks when the device's launch
    queue is full, so its slow instances are the GPU being behind, not a slow host."""
    return "Launch" in name

#: Calls that block the calling thread until GPU work finishes.
SYNC_APIS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
})

#: The synchronizations that wait for the whole device (every stream), not one stream or event.
DEVICE_SYNC_APIS = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "cudaThreadSynchronize"})

#: Synchronous copies whose direction is in the name: always device (or array) to host.
NAMED_DTOH_SYNC_COPIES = frozenset({"cuMemcpyDtoH", "cuMemcpyAtoH"})

#: Asynchronous copies whose direction is in the name.
NAMED_DTOH_ASYNC_COPIES = frozenset({"cuMemcpyDtoHAsync", "cuMemcpyAtoHAsync"})

#: Profiler-API capture range calls (``nsys profile -c cudaProfilerApi``).
PROFILER_START_APIS = frozenset({"cudaProfilerStart", "cuProfilerStart"})
PROFILER_STOP_APIS = frozenset({"cudaProfilerStop", "cuProfilerStop"})

#: Calls that load GPU code. With lazy loading (CUDA 11.7+, the default since 12.2) a module
#: is loaded the first time one of its kernels runs, so a new kernel in the loop costs a load.
MODULE_LOAD_APIS = frozenset({
    "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuLibraryLoadData",
    "cuLibraryLoadFromFile", "cudaLibraryLoadData", "cudaLibraryLoadFromFile", "cuLinkComplete",
    "cuModuleGetFunction", "cuLibraryGetKernel", "cuLibraryGetModule",
})

#: The loads among MODULE_LOAD_APIS (the rest are look-ups, cheap once the module is in).
MODULE_LOADS = frozenset(n for n in MODULE_LOAD_APIS if "Load" in n or n == "cuLinkComplete")

#: Allocation and free calls, with the kind of memory they manage.
ALLOC_APIS: Mapping[str, str] = {
    # device memory, runtime and driver
    "cudaMalloc": "device", "cudaFree": "device", "cudaMallocPitch": "device", "cudaMalloc3D": "device",
    "cudaMallocArray": "device", "cudaMalloc3DArray": "device", "cudaFreeArray": "device",
    "cudaMallocMipmappedArray": "device", "cudaFreeMipmappedArray": "device",
    "cuMemAlloc": "device", "cuMemAllocPitch": "device", "cuMemFree": "device",
    "cuArrayCreate": "device", "cuArray3DCreate": "device", "cuArrayDestroy": "device",
    # stream-ordered pool allocations (CUDA 11.2+): cheap while the pool keeps its memory
    "cudaMallocAsync": "stream-ordered", "cudaFreeAsync": "stream-ordered",
    "cudaMallocFromPoolAsync": "stream-ordered", "cuMemAllocAsync": "stream-ordered",
    "cuMemFreeAsync": "stream-ordered", "cuMemAllocFromPoolAsync": "stream-ordered",
    # managed memory
    "cudaMallocManaged": "managed", "cuMemAllocManaged": "managed",
    # pinned host memory: page-locking is slow, often milliseconds per call
    "cudaMallocHost": "pinned host", "cudaHostAlloc": "pinned host", "cudaFreeHost": "pinned host",
    "cudaHostRegister": "pinned host", "cudaHostUnregister": "pinned host",
    "cuMemAllocHost": "pinned host", "cuMemHostAlloc": "pinned host", "cuMemFreeHost": "pinned host",
    "cuMemHostRegister": "pinned host", "cuMemHostUnregister": "pinned host",
    # virtual memory management
    "cuMemCreate": "virtual memory", "cuMemRelease": "virtual memory", "cuMemMap": "virtual memory",
    "cuMemUnmap": "virtual memory", "cuMemAddressReserve": "virtual memory", "cuMemAddressFree": "virtual memory",
}

#: Frees that synchronize the device before they return (the stream-ordered ones do not).
SYNCHRONIZING_FREES = frozenset({"cudaFree", "cuMemFree", "cudaFreeHost", "cuMemFreeHost", "cudaFreeArray"})

#: NVTX ranges that libraries emit around their own calls: never a step of the user's loop, whatever
#: their rhythm. Matched case-sensitively at the start of the range name unless the pattern says more.
LIBRARY_RANGE_PATTERNS: tuple[str, ...] = (
    r"cub::", r"thrust::", r"cuda::", r"cccl", r"CCCL",  # CUDA C++ core libraries (CCCL 3 emits NVTX)
    r"nccl", r"NCCL",  # collectives (ncclAllReduce, ncclRecv, ...)
    r"cudnn", r"cuDNN", r"CUDNN", r"cublas", r"cuBLAS", r"CUBLAS", r"cufft", r"cuFFT", r"cusparse", r"cuSPARSE",
    r"cusolver", r"cutensor", r"curand",
    r"nvfuser", r"nvFuser", r"fusion\d*$", r"FusionExecutor", r"KernelExecutor",  # nvFuser internals
    r"DLProf", r"dlprof", r"NVTX_", r"nvtx_",
    r"Thunk:", r"Xla", r"XLA", r"xla_", r"jit_", r"pjit", r"TSL:", r"hlo_op",  # XLA/JAX executable and thunk ranges
    r"aten::", r"at::", r"c10::", r"autograd::", r"torch::", r"torch\.", r"CompiledFunction",  # PyTorch emit_nvtx
    r"cuda(Launch|Memcpy|Memset|Malloc|Free|Stream|Event|Device|Graph)", r"cu(Launch|Memcpy|MemAlloc|Stream|Graph)",
    r"TensorRT", r"\[TensorRT\]", r"trt", r"TRT",
    r"MPI_", r"omp_", r"OpenMP", r"acc_", r"OpenACC", r"__pgi",
)

#: NVTX domains libraries register (``nvtxDomainCreate``): their ranges are library ranges.
LIBRARY_DOMAINS = frozenset({
    "CCCL", "NCCL", "cuDNN", "cudnn", "cuBLAS", "cublas", "cuFFT", "nvFuser", "NVFUSER", "DLProf", "XLA", "xla",
    "JAX", "TensorRT", "NVTX_DLProf", "PyTorch", "torch", "OpenMP", "OpenACC", "MPI", "NVSHMEM",
})

_LIBRARY_RANGE = re.compile("|".join(f"(?:{p})" for p in LIBRARY_RANGE_PATTERNS))


#: A value after ``=`` (``step=12``, ``shape=[4,128]``) and a number that is a word of its own or ends
#: the name (``train_step 3``, ``iter_7``, ``Epoch 1 Step 30``, ``step12``): what changes between
#: the iterations of one range a program opens with a counter in its name.
_KEY_VALUE = re.compile(r"=(?:\[[^\]]*\]|\([^)]*\)|[^\s,;)\]}]+)")
_NUMBER = re.compile(r"(?<![A-Za-z0-9.])\d+(?:\.\d+)?|(?<=[A-Za-z])\d+$")


def range_family(name: str) -> str:
    """An NVTX range name with its counters replaced by ``#``: ``train_step 3`` -> ``train_step #``.

    ``range_push(f"train_step {i}")`` gives every iteration its own name; its family is one name
    again. Numbers glued inside a word (``fp16_gemm``) stay: they name a kind, not an iteration.
    """
    return _NUMBER.sub("#", _KEY_VALUE.sub("=#", name))


def is_library_range(name: str) -> bool:
    """Whether an NVTX range name is one a library emits (:data:`LIBRARY_RANGE_PATTERNS`)."""
    return bool(_LIBRARY_RANGE.match(name.strip()))


def flag_names(names: pd.Series, predicate: Callable[[str], bool]) -> np.ndarray:
    """``predicate`` of each row's name, judged once per distinct name (rows with no name: False).

    API and kernel tables hold millions of rows but a few hundred names; a string test per row
    costs seconds where one per category costs nothing.
    """
    cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    table = np.array([bool(predicate(str(c))) for c in cat.cat.categories] + [False], bool)
    return rows_with_codes(category_codes(cat), np.flatnonzero(table[:-1]), table)


def category_codes(names: pd.Series) -> np.ndarray:
    """The category codes of a categorical Series as a read-only view (``.cat.codes`` copies them)."""
    return names.array.codes


def rows_with_codes(codes: np.ndarray | Spliced, hits: np.ndarray, table: np.ndarray | None = None) -> np.ndarray:
    """Which rows carry one of the codes ``hits`` (``table``: the flag of each code, -1 reading the last).

    Comparisons on the narrow codes, in chunks whose temporary stays in the heap (a row-length
    comparison per code is a fresh mapping faulted in page by page; a gather would widen the codes
    to a row-length int64 index first). Many codes: one gather per chunk instead.
    """
    if not len(hits):
        return np.zeros(len(codes), bool)
    out = np.empty(len(codes), bool)
    wanted = np.asarray(hits).tolist()  # Python ints: compared in the codes' own narrow type
    scratch = np.empty(min(len(codes), _CHUNK), bool)
    for lo in range(0, len(codes), _CHUNK):
        part, into = codes[lo:lo + _CHUNK], out[lo:lo + _CHUNK]
        if table is not None and len(wanted) > 12:
            into[:] = table[part]  # more than a dozen comparisons cost more than the widened gather
            continue
        np.equal(part, wanted[0], out=into)
        for code in wanted[1:]:
            into |= np.equal(part, code, out=scratch[:len(part)])
    return out


def in_set(names: pd.Series | np.ndarray, members: frozenset[str] | Mapping[str, object]) -> np.ndarray:
    """Which rows' names are in ``members`` (a Series is judged once per distinct name)."""
    if not isinstance(names, pd.Series):
        return np.isin(np.asarray(names, dtype=object), sorted(members))
    return flag_names(names, members.__contains__)
