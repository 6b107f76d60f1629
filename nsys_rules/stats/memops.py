"""GPU memory operations (memcpy + memset) as the two ``cuda_gpu_mem_*_sum`` reports see them.

nsys names a copy ``[CUDA memcpy <label>]`` with the label of its ``copyKind`` from the export's
own ``ENUM_CUDA_MEMCPY_OPER`` table (an inner join: copies of an unlisted kind are left out), and
every memset ``[CUDA memset]``. Where nsys refuses an export without that table, we fall back to
CUPTI's fixed labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_rules.model.trace import Trace
from nsys_rules.model.windows import Window
from nsys_rules.stats.filters import gpu_mask

MEMSET = "[CUDA memset]"


@dataclass(frozen=True)
class MemOps:
    """One entry per memory operation: its operation name code, duration and size."""

    names: list[str]
    codes: np.ndarray
    durations: np.ndarray
    sizes: np.ndarray


#: CUPTI's memcpy kinds with nsys's labels, for exports without ``ENUM_CUDA_MEMCPY_OPER`` (nsys itself
#: refuses those; the CUPTI enum is fixed, so we can still name the copies).
DEFAULT_LABELS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
                  5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
                  9: "Host-to-Host", 10: "Peer-to-Peer", 11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
                  13: "Unified Device-to-Device"}


def memcpy_labels(trace: Trace) -> dict[int, str]:
    """``copyKind`` -> label from the export's ``ENUM_CUDA_MEMCPY_OPER``, else CUPTI's fixed labels."""
    cols = trace.export.columns_of("ENUM_CUDA_MEMCPY_OPER")
    if "id" not in cols or "label" not in cols:
        return dict(DEFAULT_LABELS)
    return {int(i): str(label) for i, label in trace.export.rows("ENUM_CUDA_MEMCPY_OPER", ["id", "label"])
            if i is not None and label is not None}


def load_memops(trace: Trace, window: Window | None) -> MemOps | str:
    """The memory operations in ``window``, or the reason there are none to report."""
    has_copy, has_set = trace.has("memcpy"), trace.has("memset")
    if not has_copy and not has_set:
        return (f"{trace.path} does not contain GPU memory data (no CUPTI_ACTIVITY_KIND_MEMCPY or _MEMSET table); "
                "capture with `nsys profile --trace=cuda`")
    names: list[str] = []
    codes, durations, sizes = [], [], []
    gpu_cols = ["start", "end", "bytes"] + (["correlation_id", "pid"] if window is not None else [])
    if has_copy:
        labels = memcpy_labels(trace)
        copies = trace.frame("memcpy", gpu_cols + ["copy_kind"])
        keep = gpu_mask(trace, copies, window)
        kind = copies["copy_kind"].to_numpy()
        kinds = sorted(k for k in labels if k >= 0)
        names += [f"[CUDA memcpy {labels[k]}]" for k in kinds]
        # copyKind -> index into names; kinds the enum does not list get -1 and are left out.
        lookup = np.full(max(kinds[-1] if kinds else 0, int(kind.max()) if len(kind) else 0) + 1, -1, np.int64)
        lookup[kinds] = np.arange(len(kinds))
        row_code = np.where(kind >= 0, lookup[kind.clip(0)], -1)
        keep &= row_code >= 0
        codes.append(row_code[keep])
        durations.append((copies["end"].to_numpy() - copies["start"].to_numpy())[keep])
        sizes.append(copies["bytes"].to_numpy()[keep])
    if has_set:
        sets = trace.frame("memset", gpu_cols)
        keep = gpu_mask(trace, sets, window)
        codes.append(np.full(int(keep.sum()), len(names), np.int64))
        names.append(MEMSET)
        durations.append((sets["end"].to_numpy() - sets["start"].to_numpy())[keep])
        sizes.append(sets["bytes"].to_numpy()[keep])
    ops = MemOps(names, np.concatenate(codes), np.concatenate(durations), np.concatenate(sizes))
    if not len(ops.codes):
        return "no GPU memory operations in the selected time range"
    return ops
