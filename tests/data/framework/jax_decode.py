"""A JAX jitted token loop on random weights, for nsys captures (no downloads).

One jitted decode step (embedding lookup, --layers of RMSNorm + single-head attention over a KV cache +
SwiGLU MLP, LM head, argmax) is called from a Python loop that reads each token back to the host
(int(tok)), like a greedy sampler. Weights are made with numpy on the host and moved with
jax.device_put, so the weight load is in the trace. A warm-up of --warmup steps compiles the step first.
"""
import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=64, help="measured decode iterations")
p.add_argument("--warmup", type=int, default=4)
# Llama-2-7B widths, 4 layers, like hf_generate.py.
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--inter", type=int, default=11008)
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--ctx", type=int, default=512)
p.add_argument("--device", default="gpu", help="cpu for a dry run")
a = p.parse_args()
if a.device == "cpu":
    os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np
import jax
import jax.numpy as jnp

H, I, L, V, C = a.hidden, a.inter, a.layers, a.vocab, a.ctx
rng = np.random.default_rng(0)


bank = ((rng.random(1 << 24, dtype=np.float32) - 0.5) * 0.04).astype(jnp.bfloat16)


def host(*shape):
    """Random-looking weights in host memory, cut from one bank (a billion fresh draws take too long)."""
    n = int(np.prod(shape))
    return np.resize(bank[int(rng.integers(bank.size // 2)):], n).reshape(shape)


t0 = time.perf_counter()
host_params = {
    "embed": host(V, H), "head": host(H, V), "norm": np.ones(H, jnp.bfloat16),
    "layers": [{"n1": np.ones(H, jnp.bfloat16), "qkv": host(H, 3 * H), "o": host(H, H),
                "n2": np.ones(H, jnp.bfloat16), "gu": host(H, 2 * I), "down": host(I, H)} for _ in range(L)],
}
nbytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(host_params))
t1 = time.perf_counter()
params = jax.device_put(host_params)  # the weight load: host-to-device copies
jax.block_until_ready(params)
t2 = time.perf_counter()
print(f"params: {nbytes/1e9:.3f} GB bf16 on {jax.devices()[0]}; made in {t1-t0:.1f} s, moved in {t2-t1:.2f} s",
      flush=True)


def rms(x, g):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(x.dtype) * g


def step(params, kcache, vcache, tok, pos):
    x = params["embed"][tok]
    nk, nv = [], []
    for li, ly in enumerate(params["layers"]):
        h = rms(x, ly["n1"])
        q, k, v = jnp.split(h @ ly["qkv"], 3)
        kc = jax.lax.dynamic_update_slice(kcache[li], k[None], (pos, 0))
        vc = jax.lax.dynamic_update_slice(vcache[li], v[None], (pos, 0))
        s = (kc @ q).astype(jnp.float32) / np.sqrt(H)
        s = jnp.where(jnp.arange(C) <= pos, s, -jnp.inf)
        o = jax.nn.softmax(s).astype(x.dtype) @ vc
        x = x + o @ ly["o"]
        h = rms(x, ly["n2"])
        g, u = jnp.split(h @ ly["gu"], 2)
        x = x + (jax.nn.silu(g) * u) @ ly["down"]
        nk.append(kc)
        nv.append(vc)
    logits = rms(x, params["norm"]) @ params["head"]
    return jnp.stack(nk), jnp.stack(nv), jnp.argmax(logits).astype(jnp.int32)


step_jit = jax.jit(step, donate_argnums=(1, 2))
kcache = jnp.zeros((L, C, H), jnp.bfloat16)
vcache = jnp.zeros((L, C, H), jnp.bfloat16)


def loop(n, start, tok):
    global kcache, vcache
    toks = []
    for i in range(n):
        kcache, vcache, t = step_jit(params, kcache, vcache, jnp.int32(tok), jnp.int32(start + i))
        tok = int(t)  # the host reads every token back, like a sampler
        toks.append(tok)
    return toks


t = time.perf_counter()
w = loop(a.warmup, 0, 1)
tw = time.perf_counter() - t
t = time.perf_counter()
m = loop(a.steps, a.warmup, w[-1] if w else 1)
dt = time.perf_counter() - t
report = {"jax": jax.__version__, "backend": jax.default_backend(), "warmup_iterations": len(w),
          "warmup_seconds": round(tw, 2), "measured_iterations": len(m), "seconds": round(dt, 4),
          "ms_per_step": round(dt / max(len(m), 1) * 1e3, 3), "weights_gb": round(nbytes / 1e9, 3),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}
assert len(m) == a.steps and a.warmup + a.steps <= C
print("REPORT " + json.dumps(report), flush=True)
