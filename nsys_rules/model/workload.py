"""What kind of program the trace shows, so advice speaks its language.

LLM wording (tokens, decode steps, ``.item()``, KV caches) fits only when the steps look like a
model's forward pass; an OpenMP solver, a database join or a CuPy script gets generic CUDA advice,
and so does a training loop (its ``.item()`` logs a loss, it samples no token).
"""

from __future__ import annotations

import re

import numpy as np

from nsys_rules.model.trace import Trace
from nsys_rules.model.activity import BUSY_CLASSES, KERNEL, gpu_ops
from nsys_rules.model.budget import Budget

#: Share of busy time in matrix products that, with attention or normalization kernels, marks a forward pass.
MIN_MATMUL_SHARE = 0.3
#: Kernels only a training step runs: backward passes and optimizer updates (PyTorch's fused and
#: foreach optimizers run as multi_tensor_apply kernels). Word starts keep "Hadamard" out of "adam".
TRAINING_KERNEL = re.compile(r"backward|_bwd|bwd_|multi_tensor_apply|\badam|_adam|\bsgd_|_sgd_", re.IGNORECASE)


def looks_like_training(trace: Trace) -> bool:
    """Whether any kernel of the trace is a backward pass or an optimizer update (judged per distinct name)."""
    if not trace.has("kernels"):
        return False
    names = trace.frame("kernels", ["name"])["name"]
    distinct = names.cat.categories if hasattr(names, "cat") else names.dropna().unique()
    return any(TRAINING_KERNEL.search(str(name)) for name in distinct)


def looks_like_model(trace: Trace, budget: Budget | None) -> bool:
    """Whether the loop's GPU work looks like a language model's forward pass (tokens, decode steps).

    Never for a training loop (:func:`looks_like_training`).

    Matrix products (GEMV or GEMM) take at least :data:`MIN_MATMUL_SHARE` of the kernel time,
    normalization or attention kernels run too, and the model is a transformer: attention kernels,
    or matrix-vector products (batch-1 decode) over a third of the kernel time. A convolutional
    network (GEMM-class convolutions with batch norm, no attention) is a model but not one that
    decodes tokens. The steady steps' budget decides when it shows kernels; else every kernel of
    the trace (graph-mode steps hide theirs, but the eager warm-up before a graph's capture runs
    the same kernels).
    """
    names = [c.replace(" ", "_") for c in BUSY_CLASSES]
    if budget is not None and budget.ns("gemv", "gemm", "attention", "norm", "elementwise", "reduce") > 0:
        by_class = {name: budget.ns(name) for name in names}
    else:
        ops = gpu_ops(trace)
        mask = ops.kind == KERNEL
        if not mask.any():
            return False
        sums = np.bincount(ops.cls[mask], weights=ops.duration[mask], minlength=len(BUSY_CLASSES))
        by_class = dict(zip(names, sums.tolist(), strict=True))
    kernels = sum(v for k, v in by_class.items() if k not in ("copy", "graph_replay"))
    if kernels <= 0:
        return False
    mm = by_class["gemv"] + by_class["gemm"]
    transformer = by_class["attention"] > 0 or by_class["gemv"] >= MIN_MATMUL_SHARE * kernels
    forward = mm >= MIN_MATMUL_SHARE * kernels and by_class["attention"] + by_class["norm"] > 0 and transformer
    return bool(forward and not looks_like_training(trace))
