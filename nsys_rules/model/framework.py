"""Which framework ran the program, so advice speaks its language and never another's.

A recommendation is only as good as the knob it names: ``torch.compile`` means nothing to a JAX
program, ``jax.jit`` nothing to a Rust engine. The trace says who launched the work:

- JAX/XLA: XLA's own NVTX ranges (``XlaModule``, ``Thunk:``, ``XlaCompile``) or its runtime's NVTX
  domain (``TSL``), ``XLA_FLAGS`` or ``JAX_*`` in the environment, ``jax`` on the command line;
  TensorFlow's kernels or command make the same XLA signs TensorFlow's;
- PyTorch: ATen kernels (``at::native::``, ``void at::``), its NVTX (``aten::``), ``PYTORCH_*`` or
  ``TORCH*`` variables; torch.compile when Inductor's Triton kernels run (``triton_poi_fused``,
  ``triton_red_fused``, ...); CUDA graphs when graphs are launched;
- serving engines on PyTorch: vLLM (``vllm`` kernels or command), SGLang (``sgl_kernel``),
  TensorRT-LLM (``tensorrt_llm`` kernels, TensorRT NVTX);
- TensorFlow (``tensorflow::``/Eigen kernels, ``tensorflow``/``keras`` on the command line);
- otherwise a program using the CUDA API directly: C++ (or Fortran, Julia), Rust (a Cargo
  build's ``target/release`` or ``target/debug`` binary, ``cargo run``), or Python without a
  framework (CuPy, Numba, cuda-python, Triton alone); ``language`` says which.

Detection reads distinct names only (the string tables' categories), never every row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nsys_rules.analysis.names import GRAPH_LAUNCH_APIS, in_set
from nsys_rules.analysis.taxonomy import base_name
from nsys_rules.model.trace import Trace

_INDUCTOR = re.compile(r"triton_(poi|red|per|tem|for|mm|bmm)_")
_ATEN = re.compile(r"at::native|void at::|at::cuda|c10::")
_XLA_RANGE = re.compile(r"XlaModule|Thunk:|XlaCompile|XlaPass|xla::|XLA ")
#: Kernel names XLA's GPU compiler gives its fusions and helpers (loop_add_fusion, wrapped_tanh, fusion_4, ...).
_XLA_KERNEL = re.compile(r"(loop|input)_\w+_fusion(_\d+)?$|wrapped_[a-z_]+$|fusion(_\d+)?$|gemm_fusion_dot|"
                         r"ThreeFry2x32Kernel|xla_fp_comparison|RedzoneAllocatorKernel")


@dataclass(frozen=True)
class Framework:
    """The program's framework: ``jax``, ``pytorch``, ``vllm``, ``sglang``, ``tensorrt-llm``, ``tensorflow`` or ``cuda``."""

    name: str
    compiled: bool = False  # torch.compile (Inductor kernels) or XLA (always compiled)
    graphs: bool = False  # CUDA graphs launched (XLA command buffers, torch CUDA graphs, an engine's own)
    evidence: str = ""
    #: For ``cuda`` programs, the host language from the command: ``python``, ``rust``, ``c++`` ("" unknown).
    language: str = ""

    @property
    def label(self) -> str:
        """How a report names it: ``PyTorch (torch.compile, CUDA graphs)``, ``JAX/XLA``, ``CUDA C++``."""
        cuda = {"python": "a Python program on CUDA (no framework found)", "rust": "a Rust CUDA program",
                "c++": "a CUDA C++ program"}.get(self.language, "a CUDA program")
        base = {"jax": "JAX/XLA", "pytorch": "PyTorch", "vllm": "vLLM (PyTorch)", "sglang": "SGLang (PyTorch)",
                "tensorrt-llm": "TensorRT-LLM", "tensorflow": "TensorFlow", "cuda": cuda}[self.name]
        extra = [x for x, on in (("torch.compile", self.compiled and self.is_torch), ("CUDA graphs", self.graphs)) if on]
        return f"{base} ({', '.join(extra)})" if extra else base

    @property
    def is_torch(self) -> bool:
        """PyTorch or an engine built on it (its allocator, its CUDA graphs, torch.compile apply)."""
        return self.name in ("pytorch", "vllm", "sglang")


def framework(trace: Trace) -> Framework:
    """The framework of ``trace`` (computed once per trace)."""
    return trace.memo(("framework.framework",), lambda: _detect(trace))


def _detect(trace: Trace) -> Framework:
    names = _distinct(trace, "kernels", "name")
    # The base names stand in for the short-name column: reading that column costs 0.7 s on 1M kernels.
    kernels = names + sorted({base_name(n) for n in names} - set(names))
    ranges = _distinct(trace, "nvtx", "name")
    capture = trace.capture
    command = capture.command_line.lower()
    env = {k.upper() for k in capture.environment}
    graphs = trace.has("graph_trace") or (trace.has("api") and bool(in_set(trace.api_names(), GRAPH_LAUNCH_APIS).any()))
    text = " ".join(kernels).lower()
    compiled = any(_INDUCTOR.search(k) for k in kernels)
    aten = any(_ATEN.search(k) for k in kernels) or any(r.startswith("aten::") for r in ranges)
    xla_kernels = sum(1 for k in set(kernels) if _XLA_KERNEL.match(k))
    # TensorFlow compiles with XLA too (its ranges and XLA_FLAGS look the same): its own kernels or
    # command tell it from JAX, unless JAX is named outright.
    tensorflow = "tensorflow::" in text or "eigen::" in text or bool(re.search(r"tensorflow|keras", command))
    jax_named = any(k.startswith("JAX_") for k in env) or bool(re.search(r"jax|flax|optax", command))
    # XLA's runtime (TSL) registers an NVTX domain of its own: a JAX or TensorFlow program, whatever its ranges.
    xla = any(_XLA_RANGE.search(r) for r in ranges) or "XLA_FLAGS" in env or "TSL" in ranges \
        or (xla_kernels >= 3 and not aten)
    if jax_named or (xla and not tensorflow and not aten):
        return Framework("jax", compiled=True, graphs=graphs, evidence="XLA's NVTX ranges or kernels, environment or command")
    torch_env = any(k.startswith(("PYTORCH_", "TORCH")) for k in env)
    if "tensorrt_llm" in text or "trtllm" in command or "tensorrt_llm" in command:
        return Framework("tensorrt-llm", graphs=graphs, evidence="TensorRT-LLM kernels or command")
    if "vllm" in text or re.search(r"\bvllm\b", command):
        return Framework("vllm", compiled=compiled, graphs=graphs, evidence="vLLM kernels or command")
    if "sgl_kernel" in text or "sglang" in command:
        return Framework("sglang", compiled=compiled, graphs=graphs, evidence="SGLang kernels or command")
    if not aten and tensorflow:
        return Framework("tensorflow", graphs=graphs, evidence="TensorFlow/Eigen kernels or command")
    if aten or compiled or torch_env or re.search(r"\btorch\b|transformers|lightning", command):
        what = "Inductor's Triton kernels" if compiled else "ATen kernels" if aten else "the environment or command"
        return Framework("pytorch", compiled=compiled, graphs=graphs, evidence=what)
    return Framework("cuda", graphs=graphs, evidence="no framework's kernels, ranges or command",
                     language=_language(capture.command))


def _language(command: tuple[str, ...]) -> str:
    """The host language of a program without a framework, from its recorded command ("" when unknown)."""
    if not command:
        return ""
    program = command[0].rsplit("/", 1)[-1]
    if "python" in program:
        return "python"
    if program == "cargo" or re.search(r"(^|/)target/(release|debug|[\w.-]+/(release|debug))/", command[0]):
        return "rust"
    return "c++"


def _distinct(trace: Trace, table: str, column: str) -> list[str]:
    """The distinct values of a name column (its categories), or none when the trace lacks it."""
    if not trace.has(table):
        return []
    try:
        values = trace.frame(table, [column])[column]
    except (KeyError, ValueError):
        return []
    cats = getattr(values, "cat", None)
    names = values.cat.categories if cats is not None else values.dropna().unique()
    return [str(n) for n in names]
