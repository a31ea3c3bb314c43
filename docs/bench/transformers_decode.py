"""Decode time per output token of transformers' generate on the synthetic Mixtral configuration that
`mosaic-cli bench-cuda` serves (random bf16 weights, batch 1, greedy), for the comparison in
docs/benchmarks.md. Run on the GPU machine: python3 docs/bench/transformers_decode.py [LAYERS [HIDDEN INTERMEDIATE HEADS KV_HEADS]]
(default 16 layers, bench-cuda's default depth and shapes; give bench-cuda's --layers, and its --hidden,
--intermediate, --heads and --kv-heads where it ran others, e.g. 2 4096 14336 32 8 for Mixtral-8x7B's layers)"""
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

from generate_timing import ms_per_token

layers, hidden, inter, heads, kv_heads = [int(a) for a in sys.argv[1:]] + [16, 2048, 5632, 16, 4][len(sys.argv) - 1:]
config = MixtralConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads, num_local_experts=8,
                       num_experts_per_tok=2, max_position_embeddings=4096)
torch.manual_seed(0)
with torch.device("cuda"):
    model = MixtralForCausalLM(config).to(torch.bfloat16).eval()
prompt = torch.randint(0, 32000, (1, 16), device="cuda")


print(f"transformers {__import__('transformers').__version__} torch {torch.__version__}: "
      f"{ms_per_token(model, prompt):.2f} ms per output token (batch 1, bf16, {layers} layers of hidden {hidden}, experts of {inter}, {heads}/{kv_heads} heads, {torch.cuda.get_device_name()})")
