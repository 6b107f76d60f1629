"""What kind of program the trace shows, so advice speaks its language.

LLM wording (tokens, decode steps, ``.item()``, KV caches) fits only when the steps look like a
model's forward pass; an OpenMP solver, a database join or a CuPy script gets generic CUDA advice.
"""

from __future__ import annotations

import numpy as np

from ..trace import Trace
from .activity import BUSY_CLASSES, KERNEL, gpu_ops
from .budget import Budget

#: Share of busy time in matrix products that, with attention or normalization kernels, marks a forward pass.
MIN_MATMUL_SHARE = 0.3


def looks_like_model(trace: Trace, budget: Budget | None) -> bool:
    """Whether the loop's GPU work looks like a neural network's forward pass.

    Matrix products (GEMV or GEMM) take at least :data:`MIN_MATMUL_SHARE` of the kernel time and
    attention or normalization kernels run too. The steady steps' budget decides when there is
    one and it shows kernels; else every kernel of the trace (graph-mode steps hide theirs, but the
    eager warm-up before the capture of a graph runs the same kernels).
    """
    if budget is not None and budget.ns("gemv", "gemm", "attention", "norm", "elementwise", "reduce") > 0:
        mm = budget.ns("gemv", "gemm")
        kernels = sum(budget.ns(c.replace(" ", "_")) for c in BUSY_CLASSES if c not in ("copy", "graph replay"))
        return kernels > 0 and mm >= MIN_MATMUL_SHARE * kernels and budget.ns("attention", "norm") > 0
    ops = gpu_ops(trace)
    mask = ops.kind == KERNEL
    if not mask.any():
        return False
    by_class = np.bincount(ops.cls[mask], weights=ops.duration[mask], minlength=len(BUSY_CLASSES))
    total = by_class.sum()
    index = {c: i for i, c in enumerate(BUSY_CLASSES)}
    mm = by_class[index["gemv"]] + by_class[index["gemm"]]
    return bool(total > 0 and mm >= MIN_MATMUL_SHARE * total and by_class[index["attention"]] + by_class[index["norm"]] > 0)
