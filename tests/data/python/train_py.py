"""HF Llama training with host work before each step's first launch (python call-site capture)."""
import sys, time  # noqa: E401 (kept as captured: the trace holds these line numbers)
import torch
from transformers import LlamaConfig, LlamaForCausalLM

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=8000, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512)
model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def host_work(ms=40.0):
    # pure Python busy work: the GPU idles while this runs
    t0 = time.perf_counter()
    acc = 0
    while (time.perf_counter() - t0) * 1e3 < ms:
        for i in range(200):
            acc += i * i
    return acc


def make_batch():
    return torch.randint(0, 8000, (4, 128), pin_memory=True).cuda(non_blocking=True)


def train_step(i):
    torch.cuda.nvtx.range_push(f"train_step {i}")
    host_work()
    ids = make_batch()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss = out.loss.item()
    torch.cuda.nvtx.range_pop()
    return loss


for i in range(STEPS):
    train_step(i)
torch.cuda.synchronize()
print("done")
