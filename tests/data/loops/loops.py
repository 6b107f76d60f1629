#!/usr/bin/env python3
"""Small loop workloads for nsys captures on one GPU (no downloads: random weights, models from configs).

One script, one mode per run (positional argument). Every mode ends with one line
    RESULT mode=<mode> steps=<measured iterations> warmup=<warm-up iterations> key=value ...
and the keys after those three are the facts the expected verdicts are written from (host prep ms,
bytes copied per step, the step where the shape changed...). Where a mode has an NVTX step range,
the warm-up iterations carry the same range as the measured ones (numbered ranges count from 0 over
all iterations), so the first `warmup` ranges are the warm-up. The exceptions are said in each mode.

PyTorch modes import torch only (and transformers / torchvision where named); JAX modes set their
environment before importing jax and never import torch. `--device cpu --tiny` runs any mode on a
CPU with tiny sizes (a smoke test); NVTX calls are then made only if this torch build has NVTX
(they are no-ops without a profiler), CUDA graphs become plain calls, memory is not pinned.

Modes (see README.md beside this file for the issue case each reproduces):
  train_numbered    HF LlamaForCausalLM (4 layers, hidden 1024, bf16), AdamW, batch 4 x 256; NVTX
                    `train_step {i}` with `forward` / `backward` / `optimizer` inside; loss.item() per step
  train_hostprep    the same loop; each step first tokenizes a batch on the host in plain Python (~40 ms,
                    calibrated at start), then .to("cuda") from pageable memory, inside `train_step {i}`
  resnet_cpu_batch  torchvision resnet18 training, batch 32, numpy augmentation on the host (~100 ms,
                    calibrated) every step, loss.item(); no NVTX at all
  compile_recompile torch.compile (default mode, dynamic=False) MLP block trained; NVTX `step={i}`;
                    steps 0..9 length 128, 10..19 length 192: a recompile inside the loop
  prefill_nested    8-layer Llama-like prefill of 2048 tokens, NVTX `prefill_step` > `attn` / `mlp`
  eager_regimes     eager bs-1 decode with cudnn.benchmark=True and a causal conv over the token history:
                    a new conv shape (cuDNN autotune) every step for 40 tokens, then padded to a fixed
                    bucket for 40 tokens; NVTX `decode_step`
  graph_recapture   manual CUDA graph per KV bucket, one replay per token; the bucket changes at measured
                    token 32 and the graph is captured again inside that step; NVTX `decode_step`
  tiny_upload       no loop: a small model .cuda() inside NVTX `upload`, one forward (~55 kernels), exit
  empty_cache       eager decode, a 256 MB scratch tensor and torch.cuda.empty_cache() every step
  cudnn_fp32        resnet18 fp32 training, batch 16, TF32 disabled for cuDNN and matmul; `train_step {i}`
  offload_weights   decode whose layer weights live in host memory (pinned; --pageable) and are copied to
                    the GPU every token (~411 MB) before small GEMVs; NVTX `decode_step`
  metrics_decode    bs-1 GEMV decode, bf16, weights resident, no CUDA graphs, no per-token sync; prints the
                    exact weight bytes read per token; meant for --gpu-metrics-devices=all
  jax_train         flax MLP + optax adamw, jitted step, float(loss) per step, numpy batch per step (~8 ms)
  jax_scan_decode   jitted lax.scan over 16 layers per token (bf16 GEMVs), int(tok) per token
"""
import argparse
import math
import os
import sys
import time

MODES = ["train_numbered", "train_hostprep", "resnet_cpu_batch", "compile_recompile", "prefill_nested",
         "eager_regimes", "graph_recapture", "tiny_upload", "empty_cache", "cudnn_fp32", "offload_weights",
         "metrics_decode", "jax_train", "jax_scan_decode"]

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("mode", choices=MODES)
p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke test (use with --tiny)")
p.add_argument("--tiny", action="store_true", help="tiny sizes, for a CPU smoke test")
p.add_argument("--steps", type=int, default=None, help="measured iterations (default: the mode's own)")
p.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default: the mode's own)")
p.add_argument("--prep-ms", type=float, default=None, help="host batch preparation target (hostprep, resnet, jax_train)")
p.add_argument("--pageable", action="store_true", help="offload_weights: keep host weights in pageable memory")
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()
CUDA = a.device == "cuda"


def say(*args):
    print(*args, flush=True)


def result(mode, steps, warmup, **facts):
    kv = [f"mode={mode}", f"steps={steps}", f"warmup={warmup}"]
    for k, v in facts.items():
        if isinstance(v, float):
            v = f"{v:.3f}"
        kv.append(f"{k}={str(v).replace(' ', '_')}")  # one token per fact
    say("RESULT " + " ".join(kv))


def size(full, tiny):
    return tiny if a.tiny else full


def n_steps(warmup, steps):
    return (a.warmup if a.warmup is not None else warmup), (a.steps if a.steps is not None else steps)


def mean(xs):
    return sum(xs) / max(len(xs), 1)


def calibrate(fn, target_ms, n0, rounds=4):
    """The work size n for which fn(n) takes about target_ms on this host (fn's time grows with n)."""
    def timed(n):
        t = time.perf_counter()
        fn(n)
        return (time.perf_counter() - t) * 1e3

    timed(n0)  # first call: caches, page faults
    n1, t1 = n0, min(timed(n0), timed(n0))
    n2 = max(1, int(round(n1 * target_ms / max(t1, 1e-3))))
    for _ in range(rounds):  # secant steps: the time is about base + slope * n
        if n2 == n1:
            break
        t2 = min(timed(n2), timed(n2))
        slope = (t2 - t1) / (n2 - n1)
        nxt = n2 * target_ms / max(t2, 1e-3) if slope <= 0 else n2 + (target_ms - t2) / slope
        n1, t1, n2 = n2, t2, max(1, min(int(round(nxt)), 8 * max(n2, 1)))
    return n2


# ----------------------------------------------------------------------------------------------- torch
def torch_setup():
    import torch
    torch.manual_seed(a.seed)
    if CUDA:
        if not torch.cuda.is_available():
            sys.exit("loops.py: CUDA is not available (use --device cpu for a smoke test)")
        torch.cuda.manual_seed_all(a.seed)
        say(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    else:
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
        say(f"torch {torch.__version__} on cpu")
    return torch


class Nvtx:
    """torch.cuda.nvtx push/pop with a depth check; on a CPU run only where this torch build has NVTX."""

    def __init__(self):
        self.depth = 0
        self.m = None
        import torch
        self.m = torch.cuda.nvtx
        if not CUDA:  # probe on the CPU only (on the GPU a probe range would land in the trace)
            try:
                self.m.range_push("probe")
                self.m.range_pop()
            except Exception as e:  # a CPU-only build has no NVTX: the calls become no-ops
                say(f"nvtx: off ({type(e).__name__})")
                self.m = None

    def push(self, name):
        self.depth += 1
        if self.m is not None:
            self.m.range_push(name)

    def pop(self):
        self.depth -= 1
        assert self.depth >= 0, "NVTX pop without push"
        if self.m is not None:
            self.m.range_pop()

    def range(self, name):
        nv = self

        class _R:
            def __enter__(self):
                nv.push(name)

            def __exit__(self, *exc):
                nv.pop()
                return False
        return _R()

    def done(self):
        assert self.depth == 0, f"{self.depth} NVTX ranges left open"


def sync():
    if CUDA:
        import torch
        torch.cuda.synchronize()


def dev():
    return "cuda" if CUDA else "cpu"


def rand_w(torch, *shape, dtype=None, device=None, std=0.02):
    """Random weights made where they live (a normal_ fill, seeded by torch.manual_seed)."""
    return torch.empty(*shape, dtype=dtype or torch.bfloat16, device=device or dev()).normal_(0.0, std)


def rms(torch, x, g, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * g


# ------------------------------------------------------------------------------- host data preparation
class ToyTokenizer:
    """A greedy longest-match subword tokenizer in plain Python (dict look-ups over str slices), over a
    synthetic corpus of words: the per-step host work of train_hostprep."""

    def __init__(self, rng, vocab_size, n_words=20000, max_piece=5):
        letters = list("abcdefghijklmnopqrstuvwxyz")
        pieces = set(letters)
        while len(pieces) < vocab_size - 2:
            pieces.add("".join(rng.choice(letters, int(rng.integers(2, max_piece + 1)))))
        plist = sorted(pieces)
        self.vocab = {pc: i + 2 for i, pc in enumerate(plist)}  # 0: pad, 1: end of document
        self.max_piece = max_piece
        self.words = ["".join(plist[j] for j in rng.integers(0, len(plist), int(rng.integers(1, 4))))
                      for _ in range(n_words)]
        self.pos = 0

    def encode(self, word):
        ids, i, n = [], 0, len(word)
        while i < n:
            for k in range(min(self.max_piece, n - i), 0, -1):
                t = self.vocab.get(word[i:i + k])
                if t is not None:
                    ids.append(t)
                    i += k
                    break
            else:  # unknown character: skip it
                i += 1
        return ids

    def batch(self, np, rng, n_words, rows, cols):
        ids = []
        words = self.words
        for k in range(n_words):
            ids.extend(self.encode(words[(self.pos + k) % len(words)].lower()))
            if k % 64 == 63:
                ids.append(1)
        self.pos += n_words
        arr = np.asarray(ids, dtype=np.int64)
        if arr.size < rows * cols + 1:
            arr = np.resize(arr, rows * cols + 1)
        starts = rng.integers(0, arr.size - cols + 1, rows)
        return np.stack([arr[s:s + cols] for s in starts])


# ------------------------------------------------------------------------------------------ train modes
def mode_train(hostprep):
    torch = torch_setup()
    import numpy as np
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    nv = Nvtx()
    L, H, I, NH, V = size((4, 1024, 2816, 16, 8192), (2, 64, 176, 4, 512))
    B, T = size((4, 256), (2, 32))
    warmup, steps = n_steps(3, 12)
    cfg = LlamaConfig(hidden_size=H, intermediate_size=I, num_hidden_layers=L, num_attention_heads=NH,
                      num_key_value_heads=NH, vocab_size=V, max_position_embeddings=max(512, T),
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(device=dev(), dtype=torch.bfloat16)  # built on the CPU, then moved
    model.train()
    nparams = sum(x.numel() for x in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    say(f"transformers {transformers.__version__}: Llama {L} layers, hidden {H}, {nparams / 1e6:.1f}M params bf16, "
        f"attn {getattr(model.config, '_attn_implementation', '?')}")

    rng = np.random.default_rng(a.seed)
    facts = {}
    if hostprep:
        tok = ToyTokenizer(rng, V)
        target = a.prep_ms if a.prep_ms is not None else 40.0
        n_words = calibrate(lambda n: tok.batch(np, rng, n, B, T), target, 2000)
        facts["prep_words"] = n_words
        say(f"host prep: {n_words} words tokenized per step for ~{target:.0f} ms")
        fixed = None
    else:
        g = torch.Generator(device=dev()).manual_seed(a.seed)
        fixed = [torch.randint(2, V, (B, T), device=dev(), generator=g) for _ in range(4)]

    prep_ms, step_ms, losses = [], [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        nv.push(f"train_step {i}")
        if hostprep:
            tp = time.perf_counter()
            ids = tok.batch(np, rng, n_words, B, T)
            prep_ms.append((time.perf_counter() - tp) * 1e3)
            batch = torch.from_numpy(ids).to(dev())  # pageable host-to-device copy
        else:
            batch = fixed[i % len(fixed)]
        nv.push("forward")
        loss = model(input_ids=batch, labels=batch).loss
        nv.pop()
        nv.push("backward")
        loss.backward()
        nv.pop()
        nv.push("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        nv.pop()
        losses.append(loss.item())
        nv.pop()
        step_ms.append((time.perf_counter() - t0) * 1e3)
    nv.done()
    assert all(math.isfinite(x) for x in losses), losses
    if hostprep:
        facts.update(prep_ms_mean=mean(prep_ms[warmup:]), prep_ms_min=min(prep_ms[warmup:]),
                     prep_ms_max=max(prep_ms[warmup:]), h2d_bytes_per_step=B * T * 8, h2d="pageable")
    result(a.mode, steps, warmup, first_measured_index=warmup, ranges="train_step_{i}>forward|backward|optimizer",
           step_ms_mean=mean(step_ms[warmup:]), loss_first=losses[0], loss_last=losses[-1],
           params_m=nparams / 1e6, batch=f"{B}x{T}", **facts)


# ------------------------------------------------------------------------------------------ resnet modes
def make_augment(np, rng, pool, S, B):
    """Per-image random resized crop (nearest neighbour), flip, colour-jitter passes, normalise: returns
    batch(n) -> float32 (B, 3, S, S), where n image-passes of colour jitter are spread over the B images."""
    src = pool.shape[1]
    MEAN = np.array([0.485, 0.456, 0.406], np.float32)
    STD = np.array([0.229, 0.224, 0.225], np.float32)

    def batch(image_passes):
        out = np.empty((B, 3, S, S), np.float32)
        for j, n in enumerate(rng.integers(0, len(pool), B)):
            passes = image_passes // B + (1 if j < image_passes % B else 0)
            side = int(rng.integers(int(0.6 * src), src + 1))
            y0, x0 = (int(v) for v in rng.integers(0, src - side + 1, 2))
            idx = np.arange(S) * side // S
            crop = pool[n][(y0 + idx)[:, None], (x0 + idx)[None, :]]  # uint8 gather (S, S, 3)
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            f = crop.astype(np.float32) * np.float32(1 / 255)
            for _ in range(passes):
                b, c, s = (np.float32(v) for v in rng.uniform(0.8, 1.2, 3))
                f *= b
                m = f.mean()
                f -= m
                f *= c
                f += m
                gr = f.mean(axis=2, keepdims=True)
                f -= gr
                f *= s
                f += gr
                np.clip(f, 0.0, 1.0, out=f)
            f -= MEAN
            f /= STD
            out[j] = f.transpose(2, 0, 1)
        return out
    return batch


def mode_resnet_cpu_batch():
    torch = torch_setup()
    import numpy as np
    import torchvision
    B, S, SRC, NPOOL = size((32, 224, 256, 64), (4, 64, 72, 8))
    warmup, steps = n_steps(2, 10)
    model = torchvision.models.resnet18(num_classes=1000).to(dev())
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(a.seed)
    pool = rng.integers(0, 256, (NPOOL, SRC, SRC, 3), dtype=np.uint8)
    aug = make_augment(np, rng, pool, S, B)
    target = a.prep_ms if a.prep_ms is not None else 100.0
    passes = calibrate(aug, target, B)
    say(f"torchvision {torchvision.__version__}: resnet18 batch {B}x3x{S}x{S}; host augmentation with {passes} "
        f"colour-jitter image-passes for ~{target:.0f} ms")
    prep_ms, step_ms = [], []
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        xb = aug(passes)
        yb = rng.integers(0, 1000, B)
        prep_ms.append((time.perf_counter() - t0) * 1e3)
        x = torch.from_numpy(xb).to(dev())  # pageable host-to-device copy
        y = torch.from_numpy(yb).to(dev())
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lv = loss.item()
        step_ms.append((time.perf_counter() - t0) * 1e3)
    assert math.isfinite(lv)
    result(a.mode, steps, warmup, nvtx="none", prep_ms_mean=mean(prep_ms[warmup:]), prep_ms_min=min(prep_ms[warmup:]),
           prep_ms_max=max(prep_ms[warmup:]), step_ms_mean=mean(step_ms[warmup:]), jitter_image_passes=passes,
           h2d_bytes_per_step=B * 3 * S * S * 4 + B * 8, h2d="pageable", batch=f"{B}x3x{S}x{S}")


def mode_cudnn_fp32():
    torch = torch_setup()
    import torchvision
    nv = Nvtx()
    B, S = size((16, 224), (2, 64))
    warmup, steps = n_steps(2, 8)
    # The user's choice under test: no TF32 anywhere (convolutions run as full fp32).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    flags = {"cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
             "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
             "cudnn_benchmark": torch.backends.cudnn.benchmark}
    try:
        flags["conv_fp32_precision"] = torch.backends.cudnn.conv.fp32_precision
        flags["matmul_fp32_precision"] = torch.backends.cuda.matmul.fp32_precision
    except AttributeError:
        pass
    say("flags: " + " ".join(f"{k}={v}" for k, v in flags.items()))
    model = torchvision.models.resnet18(num_classes=1000).to(dev())
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(B, 3, S, S, device=dev())
    y = torch.randint(0, 1000, (B,), device=dev())
    step_ms = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        nv.push(f"train_step {i}")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        lv = loss.item()
        nv.pop()
        step_ms.append((time.perf_counter() - t0) * 1e3)
    nv.done()
    assert math.isfinite(lv)
    result(a.mode, steps, warmup, first_measured_index=warmup, step_ms_mean=mean(step_ms[warmup:]),
           batch=f"{B}x3x{S}x{S}", dtype="float32", **flags)


# ------------------------------------------------------------------------------------------ compile mode
def mode_compile_recompile():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    D, FF, C, B = size((512, 2048, 256, 8), (32, 64, 16, 2))
    T0, T1 = size((128, 192), (16, 24))
    warmup, steps = n_steps(2, 20)
    change = steps // 2

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(D)
            self.up = torch.nn.Linear(D, FF)
            self.down = torch.nn.Linear(FF, D)
            self.head = torch.nn.Linear(D, C)

        def forward(self, x):
            h = x + self.down(F.gelu(self.up(self.ln(x))))
            return self.head(h)

    model = Block().to(dev())
    cmodel = torch.compile(model, dynamic=False)  # default mode: no CUDA graphs, static shapes
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = {T: (torch.randn(B, T, D, device=dev()), torch.randint(0, C, (B, T), device=dev())) for T in (T0, T1)}

    def step(T):
        x, y = data[T]
        loss = F.cross_entropy(cmodel(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    t0 = time.perf_counter()
    nv.push("warmup")  # the first compile (length T0) happens here, outside the numbered steps
    for _ in range(warmup):
        step(T0)
    nv.pop()
    say(f"first compile + {warmup} warm-up steps: {time.perf_counter() - t0:.1f} s")
    step_ms = []
    for i in range(steps):
        T = T0 if i < change else T1
        t0 = time.perf_counter()
        nv.push(f"step={i}")
        lv = step(T)
        nv.pop()
        step_ms.append((time.perf_counter() - t0) * 1e3)
    nv.done()
    assert math.isfinite(lv)
    compiles = "?"
    try:
        from torch._dynamo.utils import counters
        compiles = counters["stats"]["unique_graphs"]
    except Exception:
        pass
    others = [m for k, m in enumerate(step_ms) if k != change]
    result(a.mode, steps, warmup, warmup_range="warmup", ranges="step={i}", shape_change_step=change,
           seq_before=T0, seq_after=T1, recompile_step_ms=step_ms[change], other_step_ms_mean=mean(others),
           dynamo_unique_graphs=compiles, backend="inductor", dynamic=False)


# ------------------------------------------------------------------------------------------ prefill mode
def mode_prefill_nested():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    H, I, L, NH, V, T = size((4096, 11008, 8, 32, 32000, 2048), (64, 176, 2, 4, 512, 64))
    HD = H // NH
    warmup, steps = n_steps(1, 3)
    layers = [dict(n1=torch.ones(H, device=dev(), dtype=torch.bfloat16), qkv=rand_w(torch, 3 * H, H),
                   o=rand_w(torch, H, H), n2=torch.ones(H, device=dev(), dtype=torch.bfloat16),
                   gu=rand_w(torch, 2 * I, H), down=rand_w(torch, H, I)) for _ in range(L)]
    norm = torch.ones(H, device=dev(), dtype=torch.bfloat16)
    head = rand_w(torch, V, H)
    x0 = rand_w(torch, T, H, std=1.0)

    def prefill():
        x = x0
        for ly in layers:
            with nv.range("attn"):
                h = rms(torch, x, ly["n1"])
                # (1, NH, T, HD): the fused (flash) kernels take 4-D inputs only; 3-D falls back to the math path
                q, k, v = F.linear(h, ly["qkv"]).view(1, T, 3, NH, HD).permute(2, 0, 3, 1, 4).unbind(0)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + F.linear(o[0].transpose(0, 1).reshape(T, H), ly["o"])
            with nv.range("mlp"):
                h = rms(torch, x, ly["n2"])
                g, u = F.linear(h, ly["gu"]).split(I, dim=-1)
                x = x + F.linear(F.silu(g) * u, ly["down"])
        return F.linear(rms(torch, x[-1:], norm), head).argmax(-1)

    call_ms = []
    with torch.no_grad():
        for _ in range(warmup + steps):
            t0 = time.perf_counter()
            nv.push("prefill_step")
            tok = prefill()
            sync()
            nv.pop()
            call_ms.append((time.perf_counter() - t0) * 1e3)
    nv.done()
    result(a.mode, steps, warmup, ranges="prefill_step>attn|mlp", layers=L, tokens=T, hidden=H,
           nested_ranges_per_step=2 * L, call_ms_mean=mean(call_ms[warmup:]), first_call_ms=call_ms[0],
           sync="torch.cuda.synchronize per call", tok=int(tok.item()))


# ------------------------------------------------------------------------------------------ decode modes
def mode_eager_regimes():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    H, I, L, NH, V = size((1024, 2816, 2, 8, 8192), (64, 176, 2, 4, 512))
    HD, P, BUCKET = H // NH, 8, 128
    KS = [4 if l % 2 == 0 else 3 for l in range(L)]  # two conv widths: two shapes to tune per new length
    warmup, steps = n_steps(3, 80)
    boundary = steps // 2
    assert P + warmup + steps <= BUCKET
    # cuDNN autotunes every new convolution shape (and caches the winner per shape).
    torch.backends.cudnn.benchmark = True
    bf = torch.bfloat16
    emb = rand_w(torch, V, H, std=1.0)
    head = rand_w(torch, V, H)
    norm = torch.ones(H, device=dev(), dtype=bf)
    lay = [dict(n1=torch.ones(H, device=dev(), dtype=bf), qkv=rand_w(torch, 3 * H, H), o=rand_w(torch, H, H),
                conv=rand_w(torch, H, H, KS[l]), n2=torch.ones(H, device=dev(), dtype=bf), gu=rand_w(torch, 2 * I, H),
                down=rand_w(torch, H, I)) for l in range(L)]
    kc = [torch.zeros(NH, BUCKET, HD, device=dev(), dtype=bf) for _ in range(L)]
    vc = [torch.zeros(NH, BUCKET, HD, device=dev(), dtype=bf) for _ in range(L)]
    hist = [torch.zeros(1, H, BUCKET, device=dev(), dtype=bf) for _ in range(L)]  # hidden-state history
    for l in range(L):  # a prompt of P positions already in the caches
        kc[l][:, :P].normal_()
        vc[l][:, :P].normal_()
        hist[l][:, :, :P].normal_()

    def step(tok, pos, bucketed):
        x = emb[tok].unsqueeze(0)
        T = pos + 1
        for l, ly in enumerate(lay):
            h = rms(torch, x, ly["n1"])
            q, k, v = F.linear(h, ly["qkv"]).view(3, NH, 1, HD).unbind(0)
            kc[l][:, pos:T] = k
            vc[l][:, pos:T] = v
            s = (q @ kc[l][:, :T].transpose(1, 2)).float() * (1.0 / math.sqrt(HD))
            o = torch.softmax(s, -1).to(bf) @ vc[l][:, :T]
            x = x + F.linear(o.reshape(1, H), ly["o"])
            # causal conv over the token history: exact length (a new shape every token) or the fixed bucket
            hist[l][:, :, pos] = x
            src = hist[l] if bucketed else hist[l][:, :, :T]
            c = F.conv1d(src, ly["conv"])  # (1, H, len - K + 1); the output for this token is at T - K
            x = x + c[:, :, T - KS[l]]
            h = rms(torch, x, ly["n2"])
            g, u = F.linear(h, ly["gu"]).split(I, dim=-1)
            x = x + F.linear(F.silu(g) * u, ly["down"])
        return int(F.linear(rms(torch, x, norm), head).argmax(-1).item())

    tok, pos, step_ms = 1, P, []
    with torch.no_grad():
        for i in range(warmup + steps):
            m = i - warmup  # measured index
            bucketed = m < 0 or m >= boundary  # warm-up and the second regime use the bucket shape
            t0 = time.perf_counter()
            nv.push("decode_step")
            tok = step(tok, pos, bucketed)
            nv.pop()
            step_ms.append((time.perf_counter() - t0) * 1e3)
            pos += 1
    nv.done()
    r1 = step_ms[warmup:warmup + boundary]
    r2 = step_ms[warmup + boundary:]
    # medians too: a one-off hiccup should not decide the ratio
    def med(xs):
        return sorted(xs)[len(xs) // 2]

    result(a.mode, steps, warmup, regime_boundary_measured=boundary, regime_boundary_step=warmup + boundary,
           regime1="exact-length conv (cuDNN autotune per new shape)", regime2=f"bucketed conv (len {BUCKET})",
           regime1_ms_mean=mean(r1), regime2_ms_mean=mean(r2), ratio_mean=mean(r1) / mean(r2),
           regime1_ms_median=med(r1), regime2_ms_median=med(r2), ratio_median=med(r1) / med(r2),
           cudnn_benchmark=torch.backends.cudnn.benchmark, conv_widths="|".join(map(str, KS)), layers=L, hidden=H)


def mode_graph_recapture():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    H, I, L, NH, V = size((2048, 5632, 4, 16, 32000), (64, 176, 2, 4, 512))
    HD, P = H // NH, 30
    warmup, steps = n_steps(2, 64)
    buckets = (64, 128)

    def bucket_for(pos):
        return buckets[0] if pos < buckets[0] else buckets[1]

    assert P + warmup + steps <= buckets[1]
    bf = torch.bfloat16
    emb = rand_w(torch, V, H, std=1.0)
    head = rand_w(torch, V, H)
    norm = torch.ones(H, device=dev(), dtype=bf)
    lay = [dict(n1=torch.ones(H, device=dev(), dtype=bf), qkv=rand_w(torch, 3 * H, H), o=rand_w(torch, H, H),
                n2=torch.ones(H, device=dev(), dtype=bf), gu=rand_w(torch, 2 * I, H), down=rand_w(torch, H, I))
           for _ in range(L)]
    kc = [torch.zeros(NH, buckets[1], HD, device=dev(), dtype=bf) for _ in range(L)]
    vc = [torch.zeros(NH, buckets[1], HD, device=dev(), dtype=bf) for _ in range(L)]
    for l in range(L):
        kc[l][:, :P].normal_()
        vc[l][:, :P].normal_()
    # static inputs/outputs of the graphs: the token and the position live on the device
    tok_s = torch.ones(1, dtype=torch.long, device=dev())
    pos_s = torch.full((1,), P, dtype=torch.long, device=dev())
    toks = torch.zeros(warmup + steps, dtype=torch.long, device=dev())

    def forward(bucket):
        x = emb.index_select(0, tok_s)
        for l, ly in enumerate(lay):
            h = rms(torch, x, ly["n1"])
            q, k, v = F.linear(h, ly["qkv"]).view(3, NH, 1, HD).unbind(0)
            kc[l].index_copy_(1, pos_s, k)
            vc[l].index_copy_(1, pos_s, v)
            s = (q @ kc[l][:, :bucket].transpose(1, 2)).float() * (1.0 / math.sqrt(HD))
            s = s.masked_fill(torch.arange(bucket, device=s.device) > pos_s, float("-inf"))
            o = torch.softmax(s, -1).to(bf) @ vc[l][:, :bucket]
            x = x + F.linear(o.reshape(1, H), ly["o"])
            h = rms(torch, x, ly["n2"])
            g, u = F.linear(h, ly["gu"]).split(I, dim=-1)
            x = x + F.linear(F.silu(g) * u, ly["down"])
        tok_s.copy_(F.linear(rms(torch, x, norm), head).argmax(-1))

    graphs = {}

    def capture(bucket):
        """Warm up on a side stream, then capture (cudaStreamBeginCapture ... cudaGraphInstantiate)."""
        if not CUDA:  # CPU smoke test: a 'graph' is the plain call
            graphs[bucket] = lambda: forward(bucket)
            return
        saved = tok_s.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                forward(bucket)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            forward(bucket)
        tok_s.copy_(saved)  # the warm-up runs advanced the token: put it back
        graphs[bucket] = g.replay

    t0 = time.perf_counter()
    with torch.no_grad():
        capture(bucket_for(P))  # the first graph, before the loop (no NVTX range)
        say(f"first capture (bucket {bucket_for(P)}): {(time.perf_counter() - t0) * 1e3:.1f} ms")
        cur, recapture_at, pos, step_ms = bucket_for(P), None, P, []
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            nv.push("decode_step")
            b = bucket_for(pos)
            if b != cur:
                capture(b)  # inside the measured loop: a new shape bucket, a new graph
                cur, recapture_at = b, i
            pos_s.fill_(pos)
            graphs[cur]()
            toks[i:i + 1].copy_(tok_s)
            nv.pop()
            step_ms.append((time.perf_counter() - t0) * 1e3)
            pos += 1
        sync()
    nv.done()
    out = toks.tolist()
    assert recapture_at is not None, "no bucket change: use the default --steps/--warmup"
    result(a.mode, steps, warmup, recapture_measured_index=recapture_at - warmup, recapture_step=recapture_at,
           buckets="|".join(map(str, buckets)), captures=len(graphs), replays=warmup + steps,
           recapture_step_host_ms=step_ms[recapture_at], other_step_host_ms_mean=mean(
               [m for k, m in enumerate(step_ms[warmup:], warmup) if k != recapture_at]),
           per_token_sync="none", layers=L, hidden=H, last_tok=out[-1])


def mode_tiny_upload():
    torch = torch_setup()
    nv = Nvtx()
    H, FF, NB, V, B, T = size((1024, 4096, 10, 1000, 8, 64), (64, 256, 10, 100, 2, 8))

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(H)
            self.up = torch.nn.Linear(H, FF)
            self.down = torch.nn.Linear(FF, H)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.ln(x))))

    model = torch.nn.Sequential(torch.nn.Embedding(V, H), *[Block() for _ in range(NB)], torch.nn.LayerNorm(H),
                                torch.nn.Linear(H, V)).eval()  # built on the CPU, fp32
    nbytes = sum(x.numel() * x.element_size() for x in model.parameters())
    ids = torch.randint(0, V, (B, T))
    t0 = time.perf_counter()
    nv.push("upload")
    model = model.cuda() if CUDA else model  # the weight upload: pageable host-to-device copies, one per tensor
    ids = ids.to(dev())
    sync()
    nv.pop()
    up_ms = (time.perf_counter() - t0) * 1e3
    with torch.no_grad():
        out = model(ids).argmax(-1).sum().item()  # ONE forward, then exit
    nv.done()
    result(a.mode, 0, 0, loop="none", upload_bytes=nbytes, upload_tensors=len(list(model.parameters())),
           upload_ms=up_ms, forwards=1, blocks=NB, approx_kernels=5 * NB + 5, out=out)


def decode_model(torch, H, n):
    layers = [torch.nn.Linear(H, H, bias=False, dtype=torch.bfloat16, device=dev()) for _ in range(n)]
    return torch.nn.Sequential(*layers)


def mode_empty_cache():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    H, NL, SCRATCH = size((4096, 8, 256 << 20), (64, 2, 1 << 20))
    warmup, steps = n_steps(3, 40)
    model = decode_model(torch, H, NL)
    emb = rand_w(torch, H, H, std=1.0)
    tok, step_ms = 1, []
    with torch.no_grad():
        for _ in range(warmup + steps):
            t0 = time.perf_counter()
            nv.push("decode_step")
            scratch = torch.empty(SCRATCH, dtype=torch.uint8, device=dev())  # 256 MB: cudaMalloc after a flush
            scratch[:1].zero_()
            x = emb[tok].unsqueeze(0)
            for layer in model:
                x = F.silu(layer(x))
            tok = int(torch.argmax(x[0, :H - 96]).item())
            del scratch
            if CUDA:
                torch.cuda.empty_cache()  # every step: cudaFree of the cached blocks
            nv.pop()
            step_ms.append((time.perf_counter() - t0) * 1e3)
    nv.done()
    result(a.mode, steps, warmup, scratch_bytes=SCRATCH, empty_cache_every=1, step_ms_mean=mean(step_ms[warmup:]),
           tok=tok)


def mode_offload_weights():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    H, I, L, V = size((2048, 5632, 4, 8192), (64, 176, 2, 512))
    warmup, steps = n_steps(2, 24)
    bf = torch.bfloat16
    pinned = CUDA and not a.pageable
    # Host weights, cut from one random bank (fresh normal draws over 200M values take seconds on one core).
    gen = torch.Generator().manual_seed(a.seed)
    bank = (torch.randn(1 << 22, generator=gen) * 0.02).to(bf)

    def host(*shape):
        n = math.prod(shape)
        t = torch.empty(n, dtype=bf)
        for i in range(0, n, bank.numel()):
            m = min(bank.numel(), n - i)
            t[i:i + m] = bank[:m]
        t = t.view(*shape)
        return t.pin_memory() if pinned else t

    names = [("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("o", (H, H)), ("gate", (I, H)), ("up", (I, H)),
             ("down", (H, I))]
    hostw = [{nm: host(*shp) for nm, shp in names} for _ in range(L)]
    per_step = sum(t.numel() * t.element_size() for ly in hostw for t in ly.values())
    if CUDA:
        assert all(t.is_pinned() == pinned for ly in hostw for t in ly.values())
    emb = rand_w(torch, V, H, std=1.0)  # resident
    head = rand_w(torch, V, H)
    n1 = torch.ones(H, device=dev(), dtype=bf)
    say(f"host weights: {per_step / 1e6:.1f} MB copied per token, {'pinned' if pinned else 'pageable'}")

    def step(tok):
        x = emb[tok].unsqueeze(0)
        for ly in hostw:
            w = {nm: t.to(dev(), non_blocking=True) for nm, t in ly.items()}  # the per-token upload
            h = rms(torch, x, n1)
            q, k, v = F.linear(h, w["q"]), F.linear(h, w["k"]), F.linear(h, w["v"])
            x = x + F.linear(v * torch.sigmoid((q * k).sum(-1, keepdim=True)), w["o"])
            h = rms(torch, x, n1)
            x = x + F.linear(F.silu(F.linear(h, w["gate"])) * F.linear(h, w["up"]), w["down"])
            del w
        return int(F.linear(rms(torch, x, n1), head).argmax(-1).item())

    tok, step_ms = 1, []
    with torch.no_grad():
        for _ in range(warmup + steps):
            t0 = time.perf_counter()
            nv.push("decode_step")
            tok = step(tok)
            nv.pop()
            step_ms.append((time.perf_counter() - t0) * 1e3)
    nv.done()
    ms = mean(step_ms[warmup:])
    result(a.mode, steps, warmup, h2d_bytes_per_step=per_step, h2d_copies_per_step=len(names) * L,
           host_memory="pinned" if pinned else "pageable", step_ms_mean=ms,
           h2d_gbps_upper=per_step / (ms * 1e6), layers=L, hidden=H, tok=tok)


def mode_metrics_decode():
    torch = torch_setup()
    import torch.nn.functional as F
    nv = Nvtx()
    H, I, L, V = size((4096, 11008, 8, 32000), (64, 176, 2, 512))
    warmup, steps = n_steps(5, 40)
    bf = torch.bfloat16
    rmsn = (lambda x, g: F.rms_norm(x, (H,), g, 1e-6)) if hasattr(F, "rms_norm") else (lambda x, g: rms(torch, x, g))
    lay = [dict(n1=torch.ones(H, device=dev(), dtype=bf), qkv=rand_w(torch, 3 * H, H), o=rand_w(torch, H, H),
                n2=torch.ones(H, device=dev(), dtype=bf), gu=rand_w(torch, 2 * I, H), down=rand_w(torch, H, I))
           for _ in range(L)]
    norm = torch.ones(H, device=dev(), dtype=bf)
    head = rand_w(torch, V, H)
    emb = rand_w(torch, V, H, std=1.0)
    # Bytes read per token: every layer tensor, the final norm, the LM head and the one embedding row.
    weight_bytes = sum(t.numel() * t.element_size() for ly in lay for t in ly.values())
    weight_bytes += norm.numel() * 2 + head.numel() * 2 + H * 2
    tok = torch.ones(1, dtype=torch.long, device=dev())
    toks = torch.zeros(warmup + steps, dtype=torch.long, device=dev())

    def step(tok):
        x = emb.index_select(0, tok)
        for ly in lay:
            h = rmsn(x, ly["n1"])
            qkv = F.linear(h, ly["qkv"])
            # attention over a one-entry context returns v: q and k are read and computed, then unused
            x = x + F.linear(qkv[:, 2 * H:], ly["o"])
            h = rmsn(x, ly["n2"])
            g, u = F.linear(h, ly["gu"]).split(I, dim=-1)
            x = x + F.linear(F.silu(g) * u, ly["down"])
        return F.linear(rmsn(x, norm), head).argmax(-1)

    with torch.no_grad():
        for i in range(warmup):
            nv.push("decode_step")
            tok = step(tok)
            toks[i:i + 1].copy_(tok)
            nv.pop()
        sync()
        t0 = time.perf_counter()
        for i in range(warmup, warmup + steps):
            nv.push("decode_step")
            tok = step(tok)
            toks[i:i + 1].copy_(tok)
            nv.pop()
        sync()
        dt = time.perf_counter() - t0
    nv.done()
    out = toks.tolist()
    ms = dt / steps * 1e3
    result(a.mode, steps, warmup, weight_bytes=weight_bytes, ms_per_token=ms, gbps=weight_bytes / (ms * 1e6),
           per_token_sync="none", cuda_graphs="off", layers=L, hidden=H, inter=I, vocab=V, last_tok=out[-1])


# -------------------------------------------------------------------------------------------------- jax
def jax_setup():
    os.environ["JAX_PLATFORMS"] = "cpu" if not CUDA else "cuda"  # fail loudly rather than fall back to the CPU
    import jax
    backend = jax.default_backend()
    say(f"jax {jax.__version__} backend {backend} devices {jax.devices()} XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    if CUDA and backend != "gpu":
        sys.exit(f"loops.py: JAX picked {backend}, not the GPU")
    return jax


def jax_key(jax, seed):
    make = getattr(jax.random, "key", None) or jax.random.PRNGKey  # typed keys where this JAX has them
    return make(seed)


def mode_jax_train():
    jax = jax_setup()
    import jax.numpy as jnp
    import numpy as np
    B, D, W, DEPTH, C = size((256, 512, 2048, 4, 10), (8, 16, 32, 2, 4))
    warmup, steps = n_steps(3, 20)
    key = jax_key(jax, a.seed)
    x0 = jnp.zeros((B, D), jnp.float32)
    params = apply = None
    try:  # flax linen where it imports and initialises; else the same MLP in plain JAX
        import flax
        import flax.linen as nn

        class MLP(nn.Module):
            @nn.compact
            def __call__(self, x):
                for _ in range(DEPTH):
                    x = nn.gelu(nn.Dense(W)(x))
                return nn.Dense(C)(x)
        model = MLP()
        params = model.init(key, x0)["params"]

        def apply(p, x):
            return model.apply({"params": p}, x)
        flavour = f"flax.linen {flax.__version__}"
    except Exception as e:
        say(f"flax linen unusable ({type(e).__name__}: {e}): plain JAX MLP")
        dims = [D] + [W] * DEPTH + [C]
        keys = jax.random.split(key, len(dims) - 1)
        params = [{"w": jax.random.normal(k, (i, o)) / np.sqrt(i), "b": jnp.zeros(o)}
                  for k, i, o in zip(keys, dims[:-1], dims[1:], strict=True)]

        def apply(p, x):
            for ly in p[:-1]:
                x = jax.nn.gelu(x @ ly["w"] + ly["b"])
            return x @ p[-1]["w"] + p[-1]["b"]
        flavour = "plain jax"

    def loss_fn(p, x, y):
        logits = apply(p, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    tx = None
    try:
        import optax
        tx = optax.adamw(1e-3, weight_decay=1e-4)
        opt_state = tx.init(params)
        flavour += f" + optax {optax.__version__}"

        def train_step(p, s, x, y):
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
            upd, s = tx.update(g, s, p)
            return optax.apply_updates(p, upd), s, loss
    except Exception as e:
        say(f"optax unusable ({type(e).__name__}: {e}): hand-written adamw")
        flavour += " + hand-written adamw"
        tm = jax.tree_util.tree_map
        opt_state = (tm(jnp.zeros_like, params), tm(jnp.zeros_like, params), jnp.zeros((), jnp.int32))

        def train_step(p, s, x, y):
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
            m, v, t = s
            t = t + 1
            m = tm(lambda m, g: 0.9 * m + 0.1 * g, m, g)
            v = tm(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
            c1, c2 = 1 - 0.9 ** t, 1 - 0.999 ** t
            p = tm(lambda p, m, v: p - 1e-3 * ((m / c1) / (jnp.sqrt(v / c2) + 1e-8) + 1e-4 * p), p, m, v)
            return p, (m, v, t), loss

    step_jit = jax.jit(train_step, donate_argnums=(0, 1))
    rng = np.random.default_rng(a.seed)
    proj = rng.standard_normal((D, C)).astype(np.float32)

    def host_batch(passes):
        """numpy on the host: draw features, standardise, `passes` rounds of a sort-based rank transform
        over a few columns (a feature-engineering stand-in), labels from a fixed teacher."""
        x = rng.standard_normal((B, D), dtype=np.float32)
        x -= x.mean(axis=0, keepdims=True)
        x /= x.std(axis=0, keepdims=True) + 1e-6
        for _ in range(passes):
            cols = rng.integers(0, D, 8)
            r = np.argsort(np.argsort(x[:, cols], axis=0), axis=0).astype(np.float32)
            x[:, cols] = 0.5 * x[:, cols] + 0.5 * (r / B - 0.5)
            x = np.tanh(x)
        y = (x @ proj).argmax(axis=1).astype(np.int32)
        return x, y

    target = a.prep_ms if a.prep_ms is not None else 8.0
    passes = calibrate(host_batch, target, 4)
    say(f"{flavour}: MLP {DEPTH}x{W}, batch {B}x{D}; host batch {passes} passes for ~{target:.0f} ms")
    prep_ms, step_ms, losses = [], [], []
    t_compile = time.perf_counter()
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        x, y = host_batch(passes)
        prep_ms.append((time.perf_counter() - t0) * 1e3)
        params, opt_state, loss = step_jit(params, opt_state, x, y)  # numpy in: host-to-device copies
        losses.append(float(loss))  # the host reads the loss back every step
        step_ms.append((time.perf_counter() - t0) * 1e3)
        if i == 0:
            say(f"first step (compile): {time.perf_counter() - t_compile:.1f} s")
    assert all(math.isfinite(v) for v in losses), losses
    result(a.mode, steps, warmup, nvtx="none (XLA's own only)", prep_ms_mean=mean(prep_ms[warmup:]),
           step_ms_mean=mean(step_ms[warmup:]), host_readback="float(loss) per step", loss_first=losses[0],
           loss_last=losses[-1], model=flavour.replace(" ", "_"), backend=jax.default_backend(),
           xla_flags=os.environ.get("XLA_FLAGS", "") or "default")


def mode_jax_scan_decode():
    jax = jax_setup()
    import jax.numpy as jnp
    H, I, L, V = size((2048, 5632, 16, 32000), (64, 176, 16, 512))
    warmup, steps = n_steps(4, 64)
    bf = jnp.bfloat16
    keys = jax.random.split(jax_key(jax, a.seed), 6)

    @jax.jit
    def init(keys):
        def n(k, shape):
            return (jax.random.normal(k, shape, jnp.float32) * 0.02).astype(bf)
        return {"embed": (jax.random.normal(keys[0], (V, H), jnp.float32)).astype(bf), "head": n(keys[1], (H, V)),
                "norm": jnp.ones(H, bf),
                "layers": {"n1": jnp.ones((L, H), bf), "o": n(keys[2], (L, H, H)), "n2": jnp.ones((L, H), bf),
                           "gu": n(keys[3], (L, H, 2 * I)), "down": n(keys[4], (L, I, H))}}

    params = jax.block_until_ready(init(keys))  # made on the device: no weight upload
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))

    def rms(x, g):
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(x.dtype) * g

    def layer(x, ly):
        x = x + rms(x, ly["n1"]) @ ly["o"]
        g, u = jnp.split(rms(x, ly["n2"]) @ ly["gu"], 2, axis=-1)
        return x + (jax.nn.silu(g) * u) @ ly["down"], None

    @jax.jit
    def step(params, tok):
        x = params["embed"][tok][None, :]
        x, _ = jax.lax.scan(layer, x, params["layers"])
        return jnp.argmax(rms(x, params["norm"]) @ params["head"]).astype(jnp.int32)

    def loop(n, tok):
        out, ms = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            tok = int(step(params, jnp.int32(tok)))  # the host reads every token back, like a sampler
            ms.append((time.perf_counter() - t0) * 1e3)
            out.append(tok)
        return out, ms

    t0 = time.perf_counter()
    w, _ = loop(warmup, 1)
    tw = time.perf_counter() - t0
    m, ms = loop(steps, w[-1] if w else 1)
    result(a.mode, steps, warmup, nvtx="none (XLA's own only)", layers_scanned=L, weights_bytes=nbytes,
           warmup_s=tw, step_ms_mean=mean(ms), host_readback="int(tok) per token", backend=jax.default_backend(),
           xla_flags=os.environ.get("XLA_FLAGS", "") or "default", last_tok=m[-1])


# ------------------------------------------------------------------------------------------------ main
DISPATCH = {
    "train_numbered": lambda: mode_train(False),
    "train_hostprep": lambda: mode_train(True),
    "resnet_cpu_batch": mode_resnet_cpu_batch,
    "compile_recompile": mode_compile_recompile,
    "prefill_nested": mode_prefill_nested,
    "eager_regimes": mode_eager_regimes,
    "graph_recapture": mode_graph_recapture,
    "tiny_upload": mode_tiny_upload,
    "empty_cache": mode_empty_cache,
    "cudnn_fp32": mode_cudnn_fp32,
    "offload_weights": mode_offload_weights,
    "metrics_decode": mode_metrics_decode,
    "jax_train": mode_jax_train,
    "jax_scan_decode": mode_jax_scan_decode,
}

if __name__ == "__main__":
    if a.pageable and a.mode != "offload_weights":
        p.error("--pageable is for offload_weights only")
    t_start = time.perf_counter()
    DISPATCH[a.mode]()
    say(f"done {a.mode} in {time.perf_counter() - t_start:.1f} s")
