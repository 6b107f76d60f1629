#!/usr/bin/env python3
"""Workloads for issue 37's cases: causes that only evidence in the trace can name.

    python3 causeloops.py MODE [flags]     (one mode per run; --device cpu --tiny: a CPU smoke test)

Modes (random weights, nothing downloaded):
  serve           a serving-like loop over a plain-torch Llama-like model (8 layers, hidden 2048, bf16) with
                  8 request slots and a static KV cache: every 8th step prefills a new 512-token prompt
                  into a slot and then decodes the running slots; the other steps only decode all 8
                  slots. Each step ends with `.tolist()` of the sampled tokens (the server streams them).
                  Every step is the same NVTX range `serve_step` (nothing in the name tells the kinds).
  compile_rotate  torch.compile(dynamic=False) of a small residual MLP stack trained with eager AdamW, four
                  sequence lengths in rotation (128, 192, 256, 320); one warm-up step (NVTX `warmup`) at
                  the first length compiles once, then measured steps `step={i}` at lengths 192, 256, 320,
                  128, ...: steps 0, 1 and 2 recompile inside the loop. `loss.item()` every step.
  jax_tokens      a JAX token loop of several jitted calls per token (embedding, 4 layer groups, head +
                  argmax) and `int(tok)` per token; each layer group writes its K/V cache (two
                  4096 x 4096 bf16 arrays, 32 MiB each) with `.at[pos].set()` WITHOUT donating it, so
                  XLA copies both caches device to device every call. No NVTX of its own.

Every run ends with `RESULT mode=M steps=N warmup=W key=value ...`.
"""
import argparse
import os
import statistics
import sys
import time

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("mode", choices=["serve", "compile_rotate", "jax_tokens"])
p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
p.add_argument("--tiny", action="store_true")
p.add_argument("--steps", type=int, default=None)
p.add_argument("--warmup", type=int, default=None)
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


def torch_setup():
    import torch
    torch.manual_seed(0)
    if CUDA and not torch.cuda.is_available():
        sys.exit("causeloops.py: no CUDA device")
    if CUDA:
        say(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    return torch


class Nv:
    """torch NVTX push/pop; a no-op on a CPU build without NVTX."""

    def __init__(self, torch):
        self.m = torch.cuda.nvtx
        if not CUDA:
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


def sync(torch):
    if CUDA:
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------------ serve
def mode_serve():
    torch = torch_setup()
    F = torch.nn.functional
    dev = "cuda" if CUDA else "cpu"
    L, H, nh, I, V, S, B, P = pick((8, 2048, 16, 5632, 32000, 1024, 8, 512), (2, 64, 4, 128, 256, 128, 4, 16))
    EVERY = 8
    warmup, steps = counts(3, 48)
    hd = H // nh
    bf = torch.bfloat16

    def w(*shape):
        return torch.empty(*shape, dtype=bf, device=dev).normal_(0.0, 0.02)
    emb, lm = w(V, H), w(V, H)
    layers = [dict(qkv=w(3 * H, H), o=w(H, H), gate=w(I, H), up=w(I, H), down=w(H, I)) for _ in range(L)]
    ck = [torch.zeros(B, nh, S, hd, dtype=bf, device=dev) for _ in range(L)]
    cv = [torch.zeros(B, nh, S, hd, dtype=bf, device=dev) for _ in range(L)]
    lens = torch.full((B,), 64, device=dev)  # every slot starts as a request 64 tokens in
    span = torch.arange(S, device=dev)
    slots = torch.arange(B, device=dev)
    tokens = torch.randint(1, V, (B,), device=dev)

    def rms(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def mlp(ly, x):
        h = rms(x)
        return x + F.linear(F.silu(F.linear(h, ly["gate"])) * F.linear(h, ly["up"]), ly["down"])

    def decode():
        """One token for every slot: GEMVs over the batch, attention over each slot's cache."""
        x = emb[tokens]  # [B, H]
        mask = (span.view(1, S) > lens.view(B, 1)).view(B, 1, 1, S)
        for ly, k_c, v_c in zip(layers, ck, cv, strict=False):
            q, k, v = F.linear(rms(x), ly["qkv"]).view(B, 3, nh, hd).unbind(1)
            k_c[slots, :, lens] = k
            v_c[slots, :, lens] = v
            att = (q.unsqueeze(2) @ k_c.transpose(2, 3)) * hd ** -0.5  # [B, nh, 1, S]
            o = (att.masked_fill(mask, float("-inf")).softmax(-1) @ v_c).reshape(B, H)
            x = mlp(ly, x + F.linear(o, ly["o"]))
        nxt = F.linear(rms(x), lm).argmax(-1)
        tokens.copy_(nxt)
        lens.add_(1)
        return nxt

    def prefill(slot, prompt):
        """A new request: the prompt's forward with causal attention, its K/V written into the slot."""
        x = emb[prompt]  # [P, H]
        for ly, k_c, v_c in zip(layers, ck, cv, strict=False):
            q, k, v = F.linear(rms(x), ly["qkv"]).view(P, 3, nh, hd).permute(1, 2, 0, 3).unbind(0)
            k_c[slot, :, :P] = k
            v_c[slot, :, :P] = v
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [nh, P, hd]
            x = mlp(ly, x + F.linear(o.transpose(0, 1).reshape(P, H), ly["o"]))
        tokens[slot] = F.linear(rms(x[-1:]), lm).argmax(-1)[0]
        lens[slot] = P

    nv = Nv(torch)
    gen = torch.Generator(device=dev).manual_seed(1)
    ms = {"prefill": [], "decode": []}
    kinds = []
    out = []
    for i in range(warmup + steps):
        kind = "prefill" if i % EVERY == 0 else "decode"
        t0 = time.perf_counter()
        nv.push("serve_step")
        if kind == "prefill":
            prefill((i // EVERY) % B, torch.randint(1, V, (P,), device=dev, generator=gen))
        nxt = decode()
        out.append(nxt.tolist())  # the sampled tokens go back to the clients
        nv.pop()
        if i >= warmup:
            ms[kind].append((time.perf_counter() - t0) * 1e3)
            kinds.append(kind[0])
    sync(torch)
    result("serve", steps, warmup, prefill_every=EVERY, prompt_len=P, slots=B,
           prefill_steps_measured=len(ms["prefill"]), decode_steps_measured=len(ms["decode"]),
           prefill_step_indices="step_index%8==0_(counted_from_0_over_all_steps_incl_warmup)",
           prefill_host_ms_median=statistics.median(ms["prefill"]) if ms["prefill"] else -1.0,
           decode_host_ms_median=statistics.median(ms["decode"]), kinds_measured="".join(kinds),
           readback="tokens.tolist()_per_step", nvtx="serve_step_(same_name_for_both_kinds)",
           layers=L, hidden=H, tok_sum=sum(sum(t) for t in out) % 100003)


# --------------------------------------------------------------------------------------- compile_rotate
def mode_compile_rotate():
    torch = torch_setup()
    import torch._dynamo as dynamo
    dynamo.config.automatic_dynamic_shapes = False
    from torch._dynamo.utils import counters
    nn = torch.nn
    dev = "cuda" if CUDA else "cpu"
    B, D, Lyr = pick((16, 512, 4), (2, 16, 2))
    lengths = pick((128, 192, 256, 320), (8, 12, 16, 20))
    warmup, steps = counts(1, 24)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n, self.a, self.b = nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            return x + self.b(nn.functional.gelu(self.a(self.n(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[Block() for _ in range(Lyr)])
            self.head = nn.Linear(D, 10)

        def forward(self, x):
            return self.head(self.blocks(x).mean(1))
    net = Net().to(dev)
    cnet = torch.compile(net, dynamic=False)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev).manual_seed(0)
    nv = Nv(torch)

    def one(seq):
        x = torch.randn(B, seq, D, device=dev, generator=gen)
        y = torch.randint(0, 10, (B,), device=dev, generator=gen)
        loss = nn.functional.cross_entropy(cnet(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    def graphs():
        return counters["stats"].get("unique_graphs", 0)

    for _ in range(warmup):
        nv.push("warmup")
        one(lengths[0])
        nv.pop()
    sync(torch)
    rec, ms, seqs = [], [], []
    for i in range(steps):
        seq = lengths[(i + 1) % len(lengths)]
        g0 = graphs()
        t0 = time.perf_counter()
        nv.push(f"step={i}")
        one(seq)
        nv.pop()
        ms.append((time.perf_counter() - t0) * 1e3)
        seqs.append(seq)
        if graphs() > g0:
            rec.append(i)
    sync(torch)
    other = [m for j, m in enumerate(ms) if j not in rec]
    result("compile_rotate", steps, warmup, warmup_range="warmup", ranges="step={i}",
           lengths="|".join(map(str, lengths)), seq_of_step="|".join(map(str, seqs)),
           recompile_steps="|".join(map(str, rec)), recompile_step_ms="|".join(f"{ms[j]:.1f}" for j in rec),
           other_step_ms_median=statistics.median(other) if other else -1.0,
           dynamo_unique_graphs=graphs(), dynamic=False, automatic_dynamic_shapes=False,
           compile_threads=os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "default"))


# ------------------------------------------------------------------------------------------- jax_tokens
def mode_jax_tokens():
    if not CUDA:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    say(f"jax {jax.__version__} on {jax.devices()[0]}")
    G, H, S, V, FF = pick((4, 4096, 4096, 32000, 8192), (2, 32, 64, 128, 64))
    warmup, steps = counts(4, 64)
    bf = jnp.bfloat16
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 4 * G + 4))

    def w(*shape):
        return (jax.random.normal(next(keys), shape, jnp.float32) * 0.02).astype(bf)
    emb_w, lm_w = w(V, H), w(H, V)
    groups = [dict(qkv=w(H, 3 * H), o=w(H, H), up=w(H, FF), down=w(FF, H)) for _ in range(G)]
    kc = [jnp.zeros((S, H), bf) for _ in range(G)]
    vc = [jnp.zeros((S, H), bf) for _ in range(G)]

    @jax.jit
    def embed(tok):
        return emb_w[tok]

    @jax.jit
    def layer(x, prm, k_c, v_c, pos):
        q, k, v = jnp.split(x @ prm["qkv"], 3)
        k_c = k_c.at[pos].set(k)  # no donation: XLA copies the whole cache to a new buffer first
        v_c = v_c.at[pos].set(v)
        att = (k_c @ q).astype(jnp.float32) * (H ** -0.5)
        att = jnp.where(jnp.arange(S) <= pos, att, -jnp.inf)
        o = (jax.nn.softmax(att).astype(bf) @ v_c) @ prm["o"]
        x = x + o
        x = x + jax.nn.gelu(x @ prm["up"]) @ prm["down"]
        return x, k_c, v_c

    @jax.jit
    def head(x):
        return jnp.argmax((x @ lm_w).astype(jnp.float32))

    tok, pos = 1, 16
    ms = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        x = embed(tok)
        for g in range(G):
            x, kc[g], vc[g] = layer(x, groups[g], kc[g], vc[g], pos)
        tok = int(head(x))  # the host needs the token every step
        pos += 1
        if i >= warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    copy_bytes = 2 * G * S * H * 2
    result("jax_tokens", steps, warmup, jitted_calls_per_token=G + 2, layer_groups=G,
           cache_array_bytes=S * H * 2, cache_copy_bytes_per_token_expected=copy_bytes,
           host_readback="int(tok)_per_token", donation="none", host_token_ms_median=statistics.median(ms),
           nvtx="none", last_tok=tok, xla_flags=os.environ.get("XLA_FLAGS", "default"))


if __name__ == "__main__":
    t_start = time.perf_counter()
    {"serve": mode_serve, "compile_rotate": mode_compile_rotate, "jax_tokens": mode_jax_tokens}[a.mode]()
    say(f"done {a.mode} in {time.perf_counter() - t_start:.1f} s")
