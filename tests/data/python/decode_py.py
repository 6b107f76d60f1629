"""HF eager generate(): per-token syncs inside transformers (python call-site capture)."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=8000, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512)
model = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()


def run_generate(n):
    ids = torch.randint(0, 8000, (1, 16), device="cuda")
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)


run_generate(4)
torch.cuda.nvtx.range_push("generate")
out = run_generate(32)
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("done", out.shape)
