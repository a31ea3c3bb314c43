"""Decode time per output token of transformers' generate on the synthetic Mixtral configuration that
`mosaic-cli bench-cuda` serves (random bf16 weights, batch 1, greedy), for the comparison in
docs/benchmarks.md. Run on the GPU machine: python3 docs/bench/transformers_decode.py [LAYERS [HIDDEN INTERMEDIATE HEADS KV_HEADS]]
(default 16 layers, bench-cuda's default depth and shapes; give bench-cuda's --layers, and its --hidden,
--intermediate, --heads and --kv-heads where it ran others, e.g. 2 4096 14336 32 8 for Mixtral-8x7B's layers)"""
import sys
import time

import torch
from transformers import MixtralConfig, MixtralForCausalLM

layers, hidden, inter, heads, kv_heads = [int(a) for a in sys.argv[1:]] + [16, 2048, 5632, 16, 4][len(sys.argv) - 1:]
config = MixtralConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads, num_local_experts=8,
                       num_experts_per_tok=2, max_position_embeddings=4096)
torch.manual_seed(0)
with torch.device("cuda"):
    model = MixtralForCausalLM(config).to(torch.bfloat16).eval()
prompt = torch.randint(0, 32000, (1, 16), device="cuda")


def run(new_tokens):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


with torch.no_grad():
    run(8)  # warm-up
    short, long = min(run(1) for _ in range(3)), min(run(65) for _ in range(3))
print(f"transformers {__import__('transformers').__version__} torch {torch.__version__}: "
      f"{(long - short) / 64 * 1e3:.2f} ms per output token (batch 1, bf16, {layers} layers of hidden {hidden}, experts of {inter}, {heads}/{kv_heads} heads, {torch.cuda.get_device_name()})")
