"""Built-trace scenarios shared by several rule tests (one definition, many rules judging it)."""

from __future__ import annotations

from nsys_rules.testing import TraceBuilder

T0 = 100_000_000


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
