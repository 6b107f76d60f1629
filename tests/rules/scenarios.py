"""Built-trace scenarios shared by several rule tests (one definition, many rules judging it)."""

from __future__ import annotations

from nsys_rules.testing import TraceBuilder

T0 = 100_000_000

#: What makes a built trace read as each framework's program (``nsys_rules.api.framework``): the
#: recorded command and environment. Rules whose advice differs by framework test each one.
PROGRAMS = {
    "pytorch": {"command": ["python3", "train.py"], "environment": {"TORCH_CUDA_ARCH_LIST": "9.0"}},
    "jax": {"command": ["python3", "train.py"], "environment": {"XLA_FLAGS": "--xla_gpu_autotune_level=4"}},
    "cuda": {"command": ["./build/app"]},
}

#: Words that belong to one framework's advice only: a program of another must never see them.
FOREIGN = {
    "pytorch": ("jax", "XLA_FLAGS", "cuBLAS `cublas", "cudaStreamBeginCapture"),
    "jax": ("torch", "PyTorch", ".item()", "DataLoader", "pin_memory", "empty_cache"),
    "cuda": ("torch", "PyTorch", "jax", "XLA", ".item()", "DataLoader", "pin_memory", "empty_cache"),
}


def program(kind: str, **kw) -> TraceBuilder:
    """A TraceBuilder whose trace reads as a ``kind`` program (see :data:`PROGRAMS`); ``kw`` overrides."""
    return TraceBuilder(**{**PROGRAMS[kind], **kw})


def foreign_words(kind: str, text: str) -> list[str]:
    """The words of another framework's advice found in ``text`` (empty when the advice is the program's own)."""
    return [w for w in FOREIGN[kind] if w in text]


def eager_steps(b: TraceBuilder, steps: int = 10, per_step: int = 50, *, kernel_ns: int = 2_000,
                period_ns: int = 10_000, blocking: bool = False, lead_ns: int = 5_000) -> None:
    """Eager decode: small kernels, each launched by its own call, one every ``period_ns``.

    The launch call ends 2 us before its kernel starts; with ``blocking`` it returns only
    after the kernel ended, as under CUDA_LAUNCH_BLOCKING=1.
    """
    step_ns = per_step * period_ns + 50_000
    for i in range(steps):
        s = T0 + i * step_ns
        b.nvtx("decode_step", s, s + step_ns - 10_000)
        for j in range(per_step):
            k = s + 10_000 + j * period_ns
            if blocking:  # the call returns 1 us after its kernel ended
                corr = b.kernel(f"k{j % 5}", start=k, duration=kernel_ns, api=None)
                b.api("cudaLaunchKernel_v7000", k - lead_ns, lead_ns + kernel_ns + 1_000, correlation_id=corr)
            else:
                b.kernel(f"k{j % 5}", start=k, duration=kernel_ns, launch_at=k - lead_ns)


def copies(b: TraceBuilder, n: int, nbytes: int = 4096, **kw) -> None:
    """``n`` copies 1 ms apart (20 us each) and a kernel after them."""
    for i in range(n):
        b.memcpy(T0 + i * 1_000_000, 20_000, nbytes, **kw)
    b.kernel("k", start=T0 + n * 1_000_000 + 10_000, duration=10_000)


def sync_loop(b: TraceBuilder, steps: int = 24, *, kernel_ns: int = 800_000, host_ns: int = 100_000,
              slower: dict[int, int] | None = None, host_work: dict[int, tuple[str, int]] | None = None,
              side_copy: dict[int, int] | None = None, new_kernel: dict[int, str] | None = None,
              nvtx: bool = True, t0: int = T0) -> int:
    """A serving loop as the host lives it: each step launches its kernel, waits for the result, samples.

    Per step: ``host_work`` runs a call (name, ns) before the launch (a module load, an allocation);
    the kernel starts when the stream is free (``side_copy`` first puts a copy of that many ns on
    stream 14, which the kernel waits behind); ``slower`` adds kernel time; the host blocks in a
    readback sync until the kernel ends, then works ``host_ns`` (sampling) before the next step.
    Returns the time the loop ended.
    """
    t = t0
    for i in range(steps):
        start = t
        if host_work and i in host_work:
            name, ns = host_work[i]
            b.api(name, t, ns)
            t += ns
        launch = t
        ready = launch + 5_000
        if side_copy and i in side_copy:
            b.memcpy(ready, side_copy[i], 1 << 30, kind="DtoD", src="device", dst="device", stream=14,
                     launch_at=launch - 2_000)
            ready += side_copy[i]
        if new_kernel and i in new_kernel:
            b.kernel(new_kernel[i], start=ready, duration=20_000, launch_at=launch)
            ready += 20_000
        duration = kernel_ns + (slower or {}).get(i, 0)
        b.kernel("gemv_kernel", start=ready, duration=duration, launch_at=launch, stream=7)
        done = ready + duration
        b.memcpy(done, 2_000, 4, kind="DtoH", src="device", dst="pinned", launch_at=launch + 4_000)
        b.sync(launch + 8_000, done + 2_000 - (launch + 8_000))
        t = done + 2_000 + host_ns
        if nvtx:
            b.nvtx("step", start, t - 1_000)
    return t
