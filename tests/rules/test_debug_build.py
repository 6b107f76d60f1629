"""debug-build: command-line signals, release commands, kernel bandwidth evidence, real H200 traces."""

from __future__ import annotations

import pytest

from nsys_rules.testing import TraceBuilder, run_rule
from nsys_rules.model.commands import command_evidence

PEAK = 4_814_304_000_000
PERIOD = 1_000_000
T0 = 50_000_000
GEMV = "gemv_bf16(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int, int)"


@pytest.mark.parametrize("command,release", [
    (["target/debug/bench_serving", "request", "--output-len", "8"], "target/release/bench_serving request --output-len 8"),
    (["./target/x86_64-unknown-linux-gnu/debug/app"], "./target/x86_64-unknown-linux-gnu/release/app"),
    (["/home/me/proj/target/debug/examples/decode", "--n", "4"], "/home/me/proj/target/release/examples/decode --n 4"),
    (["cargo", "run", "--bin", "bench_serving", "--", "request", "--prompt-len", "1"],
     "cargo run -r --bin bench_serving -- request --prompt-len 1"),
    (["cargo", "+nightly", "run", "-p", "engine"], "cargo +nightly run -r -p engine"),
    (["cargo", "r", "--profile", "dev"], "cargo r -r"),
    (["cargo", "test", "--test", "decode"], "cargo test --release --test decode"),
    (["bash", "-c", "cargo run --bin x -- --steps 3"], "bash -c 'cargo run -r --bin x -- --steps 3'"),
    (["cmake-build-debug/bin/server", "--port", "1"], "cmake-build-release/bin/server --port 1"),
    (["build-debug/app"], "build-release/app"),
    (["build/Debug/app.exe"], "build/Release/app.exe"),
    (["/usr/bin/python3.11-dbg", "llm.py", "decode"], "/usr/bin/python3.11 llm.py decode"),
    (["python3d", "x.py"], "python3 x.py"),
    (["compute-sanitizer", "--tool", "memcheck", "--leak-check", "full", "./app", "-n", "3"], "./app -n 3"),
    (["cuda-memcheck", "--log-file=m.log", "target/release/app"], "target/release/app"),
    (["C:\\src\\engine\\target\\debug\\engine.exe", "--steps", "4"], "'C:\\src\\engine\\target\\release\\engine.exe' --steps 4"),
])
def test_debug_commands(command, release):
    evidence = command_evidence(tuple(command))
    assert evidence is not None, command
    assert evidence.release_command == release


@pytest.mark.parametrize("command", [
    ["target/release/bench_serving", "request"],
    ["cargo", "run", "-r", "--bin", "x"],
    ["cargo", "run", "--release"],
    ["cargo", "run", "-qr"],
    ["cargo", "run", "--profile", "release-lto"],  # custom profile: not judged
    ["cargo", "bench"],
    ["cargo", "run", "--bin", "x", "--", "-r"],  # a program flag, not cargo's -r... still cargo without -r
    ["python3", "llm.py", "decode", "--log-level", "debug"],
    ["python3", "train.py", "--out", "runs/debug/model.pt"],
    ["./app", "--config", "target/debug/settings.toml"],
    ["tools/Debug/../run.sh", "Debug/app"],
    ["python3", "debug.py"],
    ["./app", "--checker", "compute-sanitizer"],
])
def test_not_debug_commands(command):
    evidence = command_evidence(tuple(command))
    if command[-1] == "-r":
        assert evidence is not None  # the -r after `--` belongs to the program
    else:
        assert evidence is None, command


def test_fast_dev_profile_is_not_reported():
    cmd = ("cargo", "run", "--bin", "x")
    assert command_evidence(cmd, {"CARGO_PROFILE_DEV_OPT_LEVEL": "3"}) is None
    assert command_evidence(cmd, {"CARGO_PROFILE_DEV_OPT_LEVEL": "0"}) is not None


def decode(b: TraceBuilder, steps: int = 8, gemv_ns: int = 1_000_000) -> None:
    for i in range(steps):
        s = T0 + i * 3 * PERIOD
        b.nvtx("decode_step", s, s + 3 * PERIOD - 10_000)
        b.kernel(GEMV, start=s + 20_000, duration=gemv_ns)
        b.kernel("rmsnorm(__nv_bfloat16 *, int)", start=s + 40_000 + gemv_ns, duration=20_000)


def test_debug_binary_is_an_error_with_the_release_command(tmp_path):
    b = TraceBuilder(command=("target/debug/bench_serving", "request", "--prompt-len", "1"))
    decode(b)
    [f] = run_rule("debug-build", b.write(tmp_path / "t.sqlite"))
    assert f.rule == "debug-build" and f.severity.value == "error"
    assert "target/debug/bench_serving" in f.message
    assert "nsys profile" in f.recommendation and "target/release/bench_serving request --prompt-len 1" in f.recommendation
    assert "cargo build --release --bin bench_serving" in f.recommendation
    assert "cargo run -r --bin bench_serving -- request --prompt-len 1" in f.recommendation
    assert "weight_bytes" in f.message  # no bytes: the kernel side says how to get them


def test_release_build_is_quiet(tmp_path):
    b = TraceBuilder(command=("target/release/bench_serving", "request"))
    decode(b)
    assert run_rule("debug-build", b.write(tmp_path / "t.sqlite")) == []


def test_debug_command_with_kernel_evidence(tmp_path):
    b = TraceBuilder(command=("cargo", "run", "--bin", "engine"))
    decode(b)  # 1 ms of GEMV per step
    weight = int(0.02 * PEAK * 1e-3)  # 2 % of peak
    [f] = run_rule("debug-build", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": weight})
    m = {k: v.value for k, v in f.metrics.items()}
    assert f.severity.value == "error" and m["bandwidth_fraction"] == pytest.approx(2.0, rel=1e-3)
    assert "cargo run -r --bin engine" in f.recommendation


@pytest.mark.parametrize("fraction,fires", [(0.049, True), (0.05, False)])
def test_kernel_evidence_alone_is_a_warning(tmp_path, fraction, fires):
    b = TraceBuilder(command=("./server",))
    decode(b)
    weight = int(round(fraction * PEAK * 1e-3))
    found = run_rule("debug-build", b.write(tmp_path / "t.sqlite"), options={"weight_bytes": weight})
    assert bool(found) is fires
    if fires:
        assert found[0].severity.value == "warning" and "-G" in found[0].recommendation


def test_kernel_evidence_from_a_model_config(tmp_path):
    import json

    # 8 layers of hidden 1024 / inter 2816 + lm_head: 0.27 GB per step read in 2 ms = 2.8 % of peak.
    config = {"hidden_size": 1024, "num_hidden_layers": 8, "vocab_size": 32000, "num_attention_heads": 16,
              "intermediate_size": 2816, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    b = TraceBuilder(command=("./server",))
    decode(b, gemv_ns=2_000_000)
    [f] = run_rule("debug-build", b.write(tmp_path / "t.sqlite"), options={"model_config": str(tmp_path / "config.json")})
    assert f.severity.value == "warning" and "from the model config" in f.message


def test_kernel_evidence_from_the_model_load(tmp_path):
    b = TraceBuilder(command=("./server",))
    b.memcpy(1_000_000, 5_000_000, 100_000_000, kind="HtoD")  # 100 MB per 1 ms step = 2 % of peak
    decode(b)
    [f] = run_rule("debug-build", b.write(tmp_path / "t.sqlite"))
    assert f.severity.value == "warning" and "model load" in f.message


def test_no_command_and_no_kernels_is_skipped(tmp_path):
    b = TraceBuilder(command=())
    b.api("cudaMalloc_v3020", 1_000, 5_000)
    from nsys_rules.testing import run_rules

    result = run_rules(["debug-build"], b.write(tmp_path / "t.sqlite"))
    assert result.findings == [] and result.skipped and "command line" in result.skipped[0].reason


def test_real_debug_and_release_traces(h200):
    [f] = run_rule("debug-build", h200 / "rust_debug_build.sqlite")
    assert f.severity.value == "error"
    assert "target/release/bench_serving request --prompt-len 1 --output-len 8" in f.recommendation
    for name in ("rust_release_build.sqlite", "engine_moe_tail.sqlite", "decode_eager.sqlite"):
        assert run_rule("debug-build", h200 / name) == []
