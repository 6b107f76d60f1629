"""Which framework ran the program (nsys_rules.model.framework), from kernels, NVTX, environment and command."""

from __future__ import annotations

import pytest

from nsys_rules.inputs import open_trace
from nsys_rules.model.framework import framework
from nsys_rules.testing import TraceBuilder

T0 = 100_000_000


def detect(tmp_path, *, kernels=("k",), ranges=(), **builder):
    b = TraceBuilder(**builder)
    for i, name in enumerate(kernels):
        b.kernel(name, start=T0 + i * 10_000, duration=1_000)
    for i, name in enumerate(ranges):
        b.nvtx(name, T0 + i * 10_000, duration=5_000)
    return framework(open_trace(b.write(tmp_path / "t.sqlite")))


@pytest.mark.parametrize("case,name", [
    ({"kernels": ("void at::native::vectorized_elementwise_kernel<4>()",), "command": ["python3", "t.py"]}, "pytorch"),
    ({"kernels": ("triton_poi_fused_add_0",), "command": ["python3", "t.py"]}, "pytorch"),
    ({"ranges": ("XlaModule:#hlo_module=jit_step#",), "command": ["python3", "t.py"]}, "jax"),
    ({"ranges": ("TSL",), "command": ["python3", "t.py"]}, "jax"),  # XLA's runtime NVTX domain
    ({"kernels": ("loop_add_fusion", "input_reduce_fusion", "wrapped_tanh"), "command": ["python3", "t.py"]}, "jax"),
    # TensorFlow compiles with XLA too: its kernels or command make the XLA signs TensorFlow's.
    ({"kernels": ("void tensorflow::functor::BlockReduceKernel<float>()",), "ranges": ("XlaModule:#cluster_0#",),
      "command": ["python3", "t.py"]}, "tensorflow"),
    ({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}, "vllm"),
    ({"kernels": ("void tensorrt_llm::kernels::mmha_kernel()",)}, "tensorrt-llm"),
    ({"command": ["./build/app"]}, "cuda")])
def test_the_framework_is_found(tmp_path, case, name):
    assert detect(tmp_path, **case).name == name


@pytest.mark.parametrize("command,language,label", [
    (["target/release/bench_serving", "request"], "rust", "a Rust CUDA program"),
    (["cargo", "run", "-r"], "rust", "a Rust CUDA program"),
    (["/usr/bin/python3", "cupy_job.py"], "python", "a Python program on CUDA (no framework found)"),
    (["./build/solver"], "c++", "a CUDA C++ program")])
def test_a_program_without_a_framework_has_its_language(tmp_path, command, language, label):
    fw = detect(tmp_path, command=command)
    assert (fw.name, fw.language, fw.label) == ("cuda", language, label)


def test_the_label_says_compiled_and_graphs(tmp_path):
    b = TraceBuilder(command=["python3", "t.py"])
    b.kernel("triton_poi_fused_add_0", start=T0, duration=1_000)
    b.graph_launch(T0 + 10_000, 5_000, launch_at=T0 + 5_000)
    assert framework(open_trace(b.write(tmp_path / "t.sqlite"))).label == "PyTorch (torch.compile, CUDA graphs)"
