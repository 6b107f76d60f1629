#!/usr/bin/env python3
"""Before/after workloads for issue 36's fix pairs: one program, one habit switched by a flag.

    python3 fxloops.py MODE [flags]        (one mode per run; --device cpu --tiny: a CPU smoke test)

Modes (models from configs / random weights, nothing is downloaded):
  decode      plain-torch Llama-like bs-1 decode (8 layers, hidden 2048, bf16) over a static KV cache,
              the next token fed back on the device and read by the host every token (`.item()`, an
              EOS check as generation loops do). --graphs replays one captured torch.cuda.CUDAGraph per
              token instead of launching ~200 kernels eagerly: the launch-overhead pair.
              NVTX `decode_step` per token (--no-nvtx: none, the step must be found from the replays).
  mlp_train   an eager MLP (8 residual blocks, hidden 2048, batch 512) trained with AdamW, `loss.item()`
              logged every step, NVTX `train_step`. The allocation pair is this program with
              PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every tensor a cudaMalloc/cudaFree) and without.
  jax_train   a flax linen MLP + optax adamw, jitted step with the train state donated, one batch
              made on the device once (no input pipeline). --readback logs `float(loss)` every step
              (a 4-byte device-to-host copy and a host wait per step); without it the losses stay on
              the device until the end. No NVTX of its own (capture with --trace=cuda,osrt).

Every run ends with one line `RESULT mode=M steps=N warmup=W key=value ...` (the facts the truths are
checked against). Warm-up iterations carry the same NVTX range as the measured ones; the first W
ranges are the warm-up.
"""
import argparse
import os
import statistics
import sys
import time

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("mode", choices=["decode", "mlp_train", "jax_train"])
p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
p.add_argument("--tiny", action="store_true", help="tiny sizes (CPU smoke test)")
p.add_argument("--steps", type=int, default=None)
p.add_argument("--warmup", type=int, default=None)
p.add_argument("--graphs", action="store_true", help="decode: one CUDA graph replay per token")
p.add_argument("--no-item", action="store_true", help="decode: no per-token host readback")
p.add_argument("--no-nvtx", action="store_true", help="no NVTX ranges of our own")
p.add_argument("--readback", action="store_true", help="jax_train: float(loss) every step")
a = p.parse_args()
CUDA = a.device == "cuda"


def say(*args):
    print(*args, flush=True)


def result(mode, steps, warmup, **facts):
    """The one RESULT line: key=value facts, no spaces inside a value."""
    kv = [f"mode={mode}", f"steps={steps}", f"warmup={warmup}"]
    for k, v in facts.items():
        v = f"{v:.3f}" if isinstance(v, float) else v
        kv.append(f"{k}={str(v).replace(' ', '_')}")
    say("RESULT " + " ".join(kv))


def pick(full, tiny):
    return tiny if a.tiny else full


def counts(warmup, steps):
    return (a.warmup if a.warmup is not None else warmup), (a.steps if a.steps is not None else steps)


class Ranges:
    """NVTX push/pop through torch (no-ops where disabled or where this torch build lacks NVTX)."""

    def __init__(self, torch, on):
        self.m = torch.cuda.nvtx if on else None
        if self.m is not None and not CUDA:
            try:
                self.m.range_push("probe")
                self.m.range_pop()
            except Exception:
                self.m = None

    def push(self, name):
        if self.m is not None:
            self.m.range_push(name)

    def pop(self):
        if self.m is not None:
            self.m.range_pop()


def torch_setup():
    import torch
    torch.manual_seed(0)
    if CUDA:
        if not torch.cuda.is_available():
            sys.exit("fxloops.py: no CUDA device")
        say(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}; "
            f"PYTORCH_NO_CUDA_MEMORY_CACHING={os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING', '')}")
    return torch


def sync(torch):
    if CUDA:
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------- decode
class TinyLlama:
    """Llama-shaped decoder weights plus a static KV cache; step() is one token for batch 1, all in place
    on fixed buffers (token and position live on the device), so it can be captured as a CUDA graph."""

    def __init__(self, torch, layers, hidden, heads, inter, vocab, max_len, dev):
        self.t, self.L, self.H, self.nh = torch, layers, hidden, heads
        self.hd = hidden // heads
        bf = torch.bfloat16

        def w(*shape):
            return torch.empty(*shape, dtype=bf, device=dev).normal_(0.0, 0.02)
        self.emb = w(vocab, hidden)
        self.lm = w(vocab, hidden)
        self.layers = [dict(qkv=w(3 * hidden, hidden), o=w(hidden, hidden), gate=w(inter, hidden),
                            up=w(inter, hidden), down=w(hidden, inter),
                            n1=torch.ones(hidden, dtype=bf, device=dev), n2=torch.ones(hidden, dtype=bf, device=dev))
                       for _ in range(layers)]
        self.nf = torch.ones(hidden, dtype=bf, device=dev)
        self.ck = [torch.zeros(heads, max_len, self.hd, dtype=bf, device=dev) for _ in range(layers)]
        self.cv = [torch.zeros(heads, max_len, self.hd, dtype=bf, device=dev) for _ in range(layers)]
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=dev).float() / self.hd))
        ang = torch.outer(torch.arange(max_len, device=dev).float(), inv)
        self.cos, self.sin = ang.cos().to(bf), ang.sin().to(bf)
        self.span = torch.arange(max_len, device=dev)
        self.tok = torch.tensor([1], device=dev)
        self.pos = torch.tensor([16], device=dev)  # as if a 16-token prompt were in the cache

    def rms(self, x, g):
        xf = x.float()
        return (xf * self.t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * g

    def rope(self, x, c, s):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return self.t.stack((x1 * c - x2 * s, x1 * s + x2 * c), -1).flatten(-2)

    def step(self):
        t, F = self.t, self.t.nn.functional
        x = self.emb.index_select(0, self.tok)  # [1, H]
        c, s = self.cos.index_select(0, self.pos), self.sin.index_select(0, self.pos)  # [1, hd/2]
        masked = (self.span > self.pos).view(1, 1, -1)
        for ly, ck, cv in zip(self.layers, self.ck, self.cv, strict=False):
            h = self.rms(x, ly["n1"])
            q, k, v = F.linear(h, ly["qkv"]).view(3, self.nh, self.hd).unbind(0)
            q, k = self.rope(q, c, s), self.rope(k, c, s)
            ck.index_copy_(1, self.pos, k.unsqueeze(1))
            cv.index_copy_(1, self.pos, v.unsqueeze(1))
            att = t.bmm(q.unsqueeze(1), ck.transpose(1, 2)) * (self.hd ** -0.5)  # [nh, 1, max_len]
            att = att.masked_fill(masked, float("-inf")).softmax(-1)
            o = t.bmm(att, cv).reshape(1, self.H)
            x = x + F.linear(o, ly["o"])
            h = self.rms(x, ly["n2"])
            x = x + F.linear(F.silu(F.linear(h, ly["gate"])) * F.linear(h, ly["up"]), ly["down"])
        logits = F.linear(self.rms(x, self.nf), self.lm)
        self.tok.copy_(logits.argmax(-1))
        self.pos.add_(1)


def mode_decode():
    torch = torch_setup()
    dev = "cuda" if CUDA else "cpu"
    L, H, nh, I, V, S = pick((8, 2048, 16, 5632, 32000, 512), (2, 64, 4, 128, 256, 256))
    warmup, steps = counts(5, 80)
    m = TinyLlama(torch, L, H, nh, I, V, S, dev)
    nv = Ranges(torch, not a.no_nvtx)
    run = m.step
    graph = None
    if a.graphs and CUDA:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture stream (lazy inits, cuBLAS handles)
            for _ in range(2):
                m.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            m.step()
        run = graph.replay
    sync(torch)
    m.pos.fill_(16)
    host_ms, toks = [], []
    for _i in range(warmup + steps):
        t0 = time.perf_counter()
        nv.push("decode_step")
        run()
        if not a.no_item:
            toks.append(m.tok.item())  # the host needs the token (EOS check, streaming)
        nv.pop()
        host_ms.append((time.perf_counter() - t0) * 1e3)
    sync(torch)
    meas = host_ms[warmup:]
    result("decode", steps, warmup, graphs=bool(graph), per_token_readback=not a.no_item,
           nvtx="none" if a.no_nvtx else "decode_step", host_step_ms_median=statistics.median(meas),
           host_step_ms_mean=statistics.fmean(meas), layers=L, hidden=H, max_len=S,
           last_tok=toks[-1] if toks else -1)


# ---------------------------------------------------------------------------------------- mlp_train
def mode_mlp_train():
    torch = torch_setup()
    dev = "cuda" if CUDA else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    B, H, L = pick((512, 2048, 8), (8, 32, 2))
    warmup, steps = counts(5, 40)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n, self.a, self.b = nn.LayerNorm(H), nn.Linear(H, 2 * H), nn.Linear(2 * H, H)

        def forward(self, x):
            return x + self.b(nn.functional.gelu(self.a(self.n(x))))
    model = nn.Sequential(*[Block() for _ in range(L)], nn.Linear(H, 16)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
    x = torch.randn(B, H, device=dev)
    y = torch.randint(0, 16, (B,), device=dev)
    nv = Ranges(torch, not a.no_nvtx)
    host_ms, losses = [], []
    for _i in range(warmup + steps):
        t0 = time.perf_counter()
        nv.push("train_step")
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # logged every step: the host range is the whole step
        nv.pop()
        host_ms.append((time.perf_counter() - t0) * 1e3)
    sync(torch)
    meas = host_ms[warmup:]
    result("mlp_train", steps, warmup, caching_allocator=os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1",
           host_step_ms_median=statistics.median(meas), host_step_ms_mean=statistics.fmean(meas),
           batch=B, hidden=H, blocks=L, loss_first=losses[0], loss_last=losses[-1])


# ---------------------------------------------------------------------------------------- jax_train
def mode_jax_train():
    if not CUDA:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import flax
    import flax.linen as fnn
    import optax
    say(f"jax {jax.__version__} on {jax.devices()[0]}")
    B, D, W, DEPTH, C = pick((1024, 1024, 4096, 4, 16), (8, 16, 32, 2, 4))
    warmup, steps = counts(5, 60)

    class MLP(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            for _ in range(DEPTH):
                x = fnn.gelu(fnn.Dense(W)(x))
            return fnn.Dense(C)(x)
    model = MLP()
    kx, ky, kp = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (B, D))  # one batch, on the device, reused: no input pipeline
    y = jax.random.randint(ky, (B,), 0, C)
    params = model.init(kp, x)["params"]
    tx = optax.adamw(1e-4, weight_decay=1e-4)
    state = (params, tx.init(params))

    def loss_fn(prm, xb, yb):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": prm}, xb), yb).mean()

    def train_step(st, xb, yb):
        prm, opt_state = st
        loss, g = jax.value_and_grad(loss_fn)(prm, xb, yb)
        upd, opt_state = tx.update(g, opt_state, prm)
        return (optax.apply_updates(prm, upd), opt_state), loss
    step = jax.jit(train_step, donate_argnums=(0,))
    host_ms, logged, kept = [], [], []
    t_loop = None
    for i in range(warmup + steps):
        if i == warmup:
            jax.block_until_ready(state)
            t_loop = time.perf_counter()
        t0 = time.perf_counter()
        state, loss = step(state, x, y)
        if a.readback:
            logged.append(float(loss))  # the habit: the host waits for the loss every step
        else:
            kept.append(loss)
        host_ms.append((time.perf_counter() - t0) * 1e3)
    jax.block_until_ready((state, kept))
    loop_ms = (time.perf_counter() - t_loop) * 1e3
    last = logged[-1] if logged else float(kept[-1])
    first = logged[0] if logged else float(kept[0])
    result("jax_train", steps, warmup, readback="float(loss)_per_step" if a.readback else "none",
           loop_ms_per_step=loop_ms / steps, host_step_ms_median=statistics.median(host_ms[warmup:]),
           model=f"flax.linen_{flax.__version__}_+_optax_{optax.__version__}", batch=f"{B}x{D}",
           width=W, depth=DEPTH, donated="train_state", input_pipeline="none", loss_first=first, loss_last=last)


if __name__ == "__main__":
    t_start = time.perf_counter()
    {"decode": mode_decode, "mlp_train": mode_mlp_train, "jax_train": mode_jax_train}[a.mode]()
    say(f"done {a.mode} in {time.perf_counter() - t_start:.1f} s")
