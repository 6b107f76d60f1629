"""``nsys stats`` reports, reproduced: same columns, rows, rounding and ordering as nsys 2025.3.

One module per report, each with ``NAME``, ``VARIANTS`` (the ``:variant`` suffixes it accepts),
``COLUMNS`` and ``build(trace, window, variant, percentiles) -> StatsResult``.
"""

from __future__ import annotations

from types import ModuleType

from nsys_rules.errors import UsageError
from nsys_rules.stats import (cuda_api_sum, cuda_gpu_kern_sum, cuda_gpu_mem_size_sum, cuda_gpu_mem_time_sum,
                              cuda_kern_exec_sum, gpu_metric_sum, nvtx_sum)

#: Report modules by report name, in help order.
REPORTS: dict[str, ModuleType] = {m.NAME: m for m in (cuda_gpu_kern_sum, cuda_api_sum, cuda_kern_exec_sum,
                                            cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, nvtx_sum, gpu_metric_sum)}


#: What nsys calls each report in its output (`` ** <title> (<name>):``).
TITLES = {"cuda_gpu_kern_sum": "CUDA GPU Kernel Summary", "cuda_api_sum": "CUDA API Summary",
          "cuda_kern_exec_sum": "CUDA Kernel Launch & Exec Time Summary",
          "cuda_gpu_mem_time_sum": "CUDA GPU MemOps Summary (by Time)",
          "cuda_gpu_mem_size_sum": "CUDA GPU MemOps Summary (by Size)", "nvtx_sum": "NVTX Range Summary",
          "gpu_metric_sum": "GPU Metrics Summary (nsys-rules)"}

#: The reports ``nsys stats`` runs when none is named, in its order, that nsys-rules has (nsys's
#: default set also holds OS runtime, OpenMP, OpenGL, Vulkan, DirectX, WDDM, unified memory,
#: OpenACC and syscall summaries, which judge nothing CUDA and are not reproduced here).
DEFAULT_REPORTS = ("nvtx_sum", "cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum")


def parse_reports(specs: list[str] | None) -> list[tuple[str, ModuleType, str | None]]:
    """``-r`` values (repeated and/or comma-separated) -> [(spec, module, variant)]; the default set when none."""
    names = [part.strip() for spec in specs or [] for part in spec.split(",") if part.strip()]
    if specs and not names:
        raise UsageError("--report is empty; name a report, e.g. -r cuda_gpu_kern_sum")
    return [(name, *parse_report(name)) for name in dict.fromkeys(names or DEFAULT_REPORTS)]


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
