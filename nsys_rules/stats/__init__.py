"""``nsys stats`` reports, reproduced: same columns, rows, rounding and ordering as nsys 2025.3.

One module per report, each with ``NAME``, ``VARIANTS`` (the ``:variant`` suffixes it accepts),
``COLUMNS`` and ``build(trace, window, variant, percentiles) -> StatsResult``.
"""

from __future__ import annotations

from types import ModuleType

from ..errors import UsageError
from . import cuda_api_sum, cuda_gpu_kern_sum, cuda_gpu_mem_size_sum, cuda_gpu_mem_time_sum, cuda_kern_exec_sum, nvtx_sum

#: Report modules by report name, in help order.
REPORTS: dict[str, ModuleType] = {m.NAME: m for m in (cuda_gpu_kern_sum, cuda_api_sum, cuda_kern_exec_sum,
                                            cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, nvtx_sum)}


def parse_report(spec: str) -> tuple[ModuleType, str | None]:
    """``NAME[:VARIANT]`` -> (report module, variant or None); :class:`UsageError` when unknown."""
    name, _, variant = spec.partition(":")
    module = REPORTS.get(name)
    if module is None:
        raise UsageError(f"unknown report {name!r}; choose from {', '.join(REPORTS)}")
    if variant and variant not in module.VARIANTS:
        offered = ", ".join(f"{name}:{v}" for v in module.VARIANTS) or "none"
        raise UsageError(f"report {name} has no variant {variant!r} (variants: {offered})")
    return module, (variant or None)
