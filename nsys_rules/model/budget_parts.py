"""The parts of the step budget: their ids, labels and kinds, in reporting order, and the busy classes' order.

The constants the budget (:mod:`.budget`) splits a step by, and those who read a budget (the
GPU metrics' measurement, the answer, the formats) name its parts by, without the budget itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsys_rules.model.activity import BUSY_CLASSES

#: Busy classes in the order that wins an instant where the loop's own operations overlap.
BUSY_PRIORITY = ("gemm", "gemv", "attention", "norm", "elementwise", "reduce", "memory", "other", "graph replay",
                 "copy", "communication")

#: Budget part ids, in reporting order, with a label for people and whether the GPU is busy.
PARTS: tuple[tuple[str, str, str], ...] = (
    ("gemv", "GEMV kernels", "busy"), ("gemm", "GEMM kernels", "busy"), ("attention", "attention kernels", "busy"),
    ("norm", "norm kernels", "busy"), ("elementwise", "elementwise kernels", "busy"),
    ("reduce", "reduction kernels", "busy"), ("memory", "copy/fill kernels", "busy"),
    ("communication", "communication kernels", "busy"), ("other", "other kernels", "busy"),
    ("copy", "memcpy/memset", "busy"), ("graph_replay", "graph replays (kernels hidden)", "busy"),
    ("contention", "other streams/processes (loop idle)", "busy"),
    ("host_prep", "idle: host work between steps", "idle"),
    ("launch_wait", "idle: waiting for launches", "idle"), ("after_sync", "idle: after a synchronization", "idle"),
    ("allocation", "idle: allocation/free", "idle"), ("module_loading", "idle: module loading/compiling", "idle"),
    ("graph_internal", "idle: inside graph replays", "idle"), ("idle_other", "idle: other (dependencies)", "idle"),
)
LABELS = {pid: label for pid, label, _ in PARTS}
KINDS = {pid: kind for pid, _, kind in PARTS}
#: The budget part of each busy class.
CLASS_PART = {cls: cls.replace(" ", "_") for cls in BUSY_CLASSES}


def part_of_class(kernel_class: str) -> str:
    """The budget part of a kernel class (``gemv`` -> ``gemv``, ``graph replay`` -> ``graph_replay``)."""
    return CLASS_PART.get(kernel_class, "other")


@dataclass(frozen=True)
class Part:
    """One part of the budget: total over the steady steps, mean per step (over the inner steps: the first and
    the last are cut by the loop's edges), and in the median step."""

    name: str
    kind: str
    ns: int
    per_step_ns: float
    median_step_ns: int
    detail: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How people read the part's name."""
        return LABELS.get(self.name, self.name)
