"""transformers generate() on a small randomly initialised Llama, for nsys captures (no downloads).

The model is built on the CPU and moved with .to(device), so the weight load is in the trace as
host-to-device copies. Greedy, batch 1, min_new_tokens == max_new_tokens: every run makes exactly
--tokens new tokens. The decode iterations of the measured generate() are counted by a logits
processor (called once per loop iteration, outside any compiled region) and printed.
"""
import argparse
import json
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--cache", choices=["static", "dynamic"], default="dynamic")
p.add_argument("--compile-mode", default=None,
               help="torch.compile mode for the static-cache decode forward (default: transformers' own, reduce-overhead)")
p.add_argument("--profiler-range", action="store_true", help="cudaProfilerStart/Stop around the measured generate only")
p.add_argument("--warmup-tokens", type=int, default=0, help="a short generate() first (0: none)")
p.add_argument("--tokens", type=int, default=33, help="new tokens of the measured generate()")
p.add_argument("--prompt-len", type=int, default=16)
# Llama-2-7B widths, 4 layers: GEMVs large enough to dominate kernel time at batch 1.
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--inter", type=int, default=11008)
p.add_argument("--heads", type=int, default=32)
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--device", default="cuda", help="cpu for a dry run")
a = p.parse_args()

import torch
import transformers
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList
from transformers.initialization import no_init_weights

torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=a.hidden, intermediate_size=a.inter, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.heads, vocab_size=a.vocab,
                  max_position_embeddings=max(2048, a.prompt_len + a.tokens + 8))
t0 = time.perf_counter()
torch.set_default_dtype(torch.bfloat16)
with no_init_weights():  # normal_() over a billion weights takes ~10 s of one core: fill from a random bank instead
    model = LlamaForCausalLM(cfg).eval()
torch.set_default_dtype(torch.float32)
gen = torch.Generator().manual_seed(0)
bank = (torch.randn(1 << 24, generator=gen) * 0.02).to(torch.bfloat16)
half = bank.numel() // 2
with torch.no_grad():
    for prm in model.parameters():
        if prm.dim() < 2:
            continue  # RMSNorm weights keep their ones
        flat = prm.view(-1)
        for i in range(0, flat.numel(), half):
            o, n = int(torch.randint(0, half, (1,), generator=gen)), min(half, flat.numel() - i)
            flat[i:i + n].copy_(bank[o:o + n])
assert model.dtype == torch.bfloat16 and all(prm.device.type == "cpu" for prm in model.parameters())
nparams = sum(prm.numel() for prm in model.parameters())
t1 = time.perf_counter()
model.to(a.device)  # the weight load: pageable host-to-device copies
if a.device == "cuda":
    torch.cuda.synchronize()
t2 = time.perf_counter()
print(f"model: {nparams/1e6:.1f}M params, {nparams*2/1e9:.3f} GB bf16; built in {t1-t0:.1f} s, moved in {t2-t1:.2f} s",
      flush=True)


class Counter(LogitsProcessor):
    """Counts loop iterations of generate(): one call per new token (the first follows the prefill)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        return scores


forwards = {"prefill": 0, "decode": 0}
compiling = a.cache == "static"
if not compiling:
    # A hook is safe only on the eager path: it cross-checks the counter with real forward calls.
    def hook(mod, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        forwards["decode" if ids is not None and ids.shape[-1] == 1 else "prefill"] += 1
    model.register_forward_pre_hook(hook, with_kwargs=True)

gen_kwargs = dict(do_sample=False, num_beams=1, pad_token_id=0)
if a.cache == "static":
    gen_kwargs["cache_implementation"] = "static"
    # One cache size for every call, so the warm-up's compile and CUDA graphs serve the measured call.
    gen_kwargs["max_cache_len"] = a.prompt_len + max(a.tokens, a.warmup_tokens) + 8
    cc = CompileConfig(mode=a.compile_mode) if a.compile_mode else CompileConfig()
    if a.device != "cuda":
        cc._compile_all_devices = True  # dry run on the CPU: transformers compiles only on accelerators
    gen_kwargs["compile_config"] = cc

ids = torch.randint(3, a.vocab, (1, a.prompt_len), generator=torch.Generator().manual_seed(1)).to(a.device)
mask = torch.ones_like(ids)


def generate(n):
    c = Counter()
    for k in forwards:
        forwards[k] = 0
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                         logits_processor=LogitsProcessorList([c]), **gen_kwargs)
    if a.device == "cuda":
        torch.cuda.synchronize()
    return out, c.calls


report = {"transformers": transformers.__version__, "torch": torch.__version__, "cache": a.cache,
          "compile_mode": a.compile_mode or ("reduce-overhead (transformers default)" if compiling else None),
          "profiler_range": a.profiler_range, "layers": a.layers, "hidden": a.hidden}
if a.warmup_tokens:
    t = time.perf_counter()
    out, calls = generate(a.warmup_tokens)
    report["warmup"] = {"new_tokens": out.shape[1] - a.prompt_len, "loop_iterations": calls,
                        "decode_forwards": calls - 1, "seconds": round(time.perf_counter() - t, 2)}
    print("warmup:", json.dumps(report["warmup"]), flush=True)

profile = a.profiler_range and a.device == "cuda"
if profile:
    torch.cuda.profiler.start()
t = time.perf_counter()
out, calls = generate(a.tokens)
dt = time.perf_counter() - t
new = out.shape[1] - a.prompt_len
m = {"new_tokens": new, "loop_iterations": calls, "decode_forwards": calls - 1, "seconds": round(dt, 3),
     "ms_per_token": round(dt / max(new, 1) * 1e3, 3)}
if not compiling:
    m["hooked_forwards"] = dict(forwards)
report["measured"] = m
report["compiled"] = hasattr(model, "_compiled_call")
try:
    from torch._dynamo.utils import counters
    report["inductor_counters"] = {k: dict(v) for k, v in counters.items() if k in ("inductor", "stats") and v}
except Exception as e:  # counters are diagnostics only
    report["inductor_counters"] = repr(e)
assert new == a.tokens, f"generated {new} tokens, asked {a.tokens}"
assert calls == a.tokens, f"{calls} loop iterations for {a.tokens} tokens"
print("measured:", json.dumps(m), flush=True)
print("REPORT " + json.dumps(report, default=str), flush=True)
sys.stdout.flush()
# Stop last: nsys's default --capture-range-end=stop-shutdown ends the program at cudaProfilerStop,
# and the counts above must be printed first (printing makes no CUDA call).
if profile:
    torch.cuda.profiler.stop()
