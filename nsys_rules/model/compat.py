"""Why a canonical table is missing from an export, and what to do about it.

nsys writes no empty tables, so a missing table means one of: the capture did not trace that
kind of activity, the program did none of it, or nsys recorded the CUDA calls but lost the
GPU activity. The generic capture hint of each table (``Table.capture_hint``) only fits the
first case; this module tells the cases apart from what else the export holds, so a skipped
rule says the true reason.
"""

from __future__ import annotations

from nsys_rules.analysis.names import ANY_KERNEL_LAUNCH_APIS, GRAPH_LAUNCH_APIS, in_set
from nsys_rules.loaders.tables import TABLES
from nsys_rules.model.trace import Trace

#: CUDA activity tables that are written only when they have rows, once CUDA is traced.
_CUDA_ACTIVITY = {"memcpy": "memory copy", "memset": "memset", "sync": "synchronization"}


def missing_table(trace: Trace, name: str) -> tuple[str, str]:
    """(reason, fix) for a rule skipped because canonical table ``name`` is absent."""
    table = TABLES[name]
    source = table.sources[0]
    generic = (f"the trace has no {source} table", table.capture_hint)
    cuda_traced = trace.has("api")
    lost = _lost_activity(trace) if cuda_traced and name in (*_CUDA_ACTIVITY, "kernels") else 0
    if lost:
        return (f"the trace has no {source} table although the API table has {lost} kernel "
                f"launch{'es' if lost != 1 else ''}: "
                "nsys recorded the CUDA calls but no GPU activity",
                "capture again with `nsys profile --trace=cuda` from an nsys release that supports this GPU and "
                "driver (GPU activity is not traced on some WSL setups and on GPUs newer than the nsys), and let "
                "the program exit normally "
                "(`cudaDeviceSynchronize()` before exit) so the activity buffers are flushed")
    if name in _CUDA_ACTIVITY and cuda_traced:
        return (f"the trace has no {source} table: CUDA was traced but the program made no "
                f"{_CUDA_ACTIVITY[name]} (nsys writes no empty tables)", "nothing to fix: there is nothing to judge")
    if name == "kernels" and cuda_traced:
        return (f"the trace has no {source} table: CUDA was traced but the program launched no kernel",
                "nothing to fix: there is nothing to judge")
    if name == "graph_trace" and cuda_traced:
        if not _count(trace, GRAPH_LAUNCH_APIS):
            return (f"the trace has no {source} table: the program launched no CUDA graph",
                    "nothing to fix: there is nothing to judge")
        if trace.capture.graph_trace_mode == "Node":
            return (f"the trace has no {source} table: graphs were traced per node (`--cuda-graph-trace=node`)",
                    "nothing to fix: the kernel rows carry the graph's work")
    if name == "nvtx" and "NvtxEvents" in trace.capture.traced:
        return (f"the trace has no {source} table: NVTX was traced but the program emitted no NVTX event",
                "annotate the program with NVTX ranges (`torch.cuda.nvtx.range`, `nvtx.annotate`, "
                "`nvtxRangePushA`)")
    return generic


def _lost_activity(trace: Trace) -> int:
    """Kernel launches in the API table when the export has no kernel rows at all (else 0)."""
    return 0 if trace.has("kernels") else _count(trace, ANY_KERNEL_LAUNCH_APIS)


def _count(trace: Trace, base_names: frozenset[str]) -> int:
    try:
        return int(in_set(trace.api_names(), base_names).sum())
    except Exception:  # noqa: BLE001 - a reason for a skip must never fail the run
        return 0
