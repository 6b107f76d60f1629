"""Held-out PyTorch/Triton workloads (round 2), for nsys captures; no downloads, random weights.

Modes (each prints 'measured N steps' at the end):
  train      a small Transformer encoder trained with AdamW, loss.item() every step, no NVTX.
  emit_nvtx  a GEMV decode loop (8 bf16 4096x4096 linears + argmax) under
             torch.autograd.profiler.emit_nvtx(): every aten op gets its own NVTX range,
             there is no user range; token read back with .item() each step.
  freecache  the same decode loop with a user NVTX range 'decode_step' per step, a 512 MB
             scratch tensor allocated every step and torch.cuda.empty_cache() every 8 steps
             (cudaFree -> implicit device sync, then cudaMalloc again on the next step).
  triton     a Triton row-softmax kernel on a 8192x8192 fp32 tensor, with torch.cuda.synchronize()
             after each call; no NVTX; the first call JIT-compiles (module load) before the loop.
"""
import argparse
import time

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["train", "emit_nvtx", "freecache", "triton"])
p.add_argument("--steps", type=int, default=40)
p.add_argument("--warmup", type=int, default=3)
a = p.parse_args()

import torch  # noqa: E402

torch.manual_seed(0)
dev = "cuda"


def decode_model() -> torch.nn.Module:
    layers = [torch.nn.Linear(4096, 4096, bias=False, dtype=torch.bfloat16) for _ in range(8)]
    return torch.nn.Sequential(*layers).to(dev)  # built on the CPU: the weight load is in the trace


def decode_step(model: torch.nn.Module, emb: torch.Tensor, tok: int) -> int:
    x = emb[tok].unsqueeze(0)
    for layer in model:
        x = torch.nn.functional.silu(layer(x))
    return int(torch.argmax(x[0, :4000]).item())


if a.mode == "train":
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True),
        num_layers=4).to(dev)
    head = torch.nn.Linear(1024, 1000).to(dev)
    params = list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    x = torch.randn(8, 256, 1024, device=dev)
    y = torch.randint(0, 1000, (8, 256), device=dev)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        out = head(enc(x))
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 1000), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    print(f"measured {a.steps} steps (+{a.warmup} warm-up) in {time.perf_counter() - t0:.3f} s")

elif a.mode in ("emit_nvtx", "freecache"):
    model = decode_model()
    emb = torch.randn(4096, 4096, dtype=torch.bfloat16).to(dev)
    tok = 1
    with torch.no_grad():
        for _ in range(a.warmup):
            tok = decode_step(model, emb, tok)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if a.mode == "emit_nvtx":
            with torch.autograd.profiler.emit_nvtx():
                for _ in range(a.steps):
                    tok = decode_step(model, emb, tok)
        else:
            for i in range(a.steps):
                torch.cuda.nvtx.range_push("decode_step")
                scratch = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device=dev)
                scratch[:1].zero_()
                tok = decode_step(model, emb, tok)
                del scratch
                if i % 8 == 7:
                    torch.cuda.empty_cache()
                torch.cuda.nvtx.range_pop()
        print(f"measured {a.steps} steps (+{a.warmup} warm-up) in {time.perf_counter() - t0:.3f} s")

else:
    import triton
    import triton.language as tl

    @triton.jit
    def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        v = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
        v = v - tl.max(v, axis=0)
        e = tl.exp(v)
        tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)

    x = torch.randn(8192, 8192, device=dev)
    y = torch.empty_like(x)

    def call() -> None:
        softmax_rows[(8192,)](x, y, 8192, BLOCK=8192)
        torch.cuda.synchronize()

    for _ in range(a.warmup):
        call()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        call()
    print(f"measured {a.steps} steps (+{a.warmup} warm-up) in {time.perf_counter() - t0:.3f} s")
