"""Decode time per output token of transformers' generate on a DeepSeek config's shapes (random bf16
weights, batch 1, greedy): what `mosaic-cli bench-esft --device cuda` compares its batch-1 row with
(the same shapes and depth, not the same weights: a timing). Run on the GPU machine:
python3 docs/bench/transformers_deepseek_decode.py [CONFIG [LAYERS]] (default: DeepSeek-V2-Lite's
config in sample_configs/, all 27 layers; give bench-esft's --layers where it ran fewer)."""
import json
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from generate_timing import ms_per_token

path = sys.argv[1] if len(sys.argv) > 1 else "sample_configs/families/deepseek-v2-lite-esft/base/config.json"
raw = json.load(open(path))
if len(sys.argv) > 2:
    raw["num_hidden_layers"] = int(sys.argv[2])
raw.pop("auto_map", None)  # transformers' own DeepSeek classes, not the model authors' remote code
config = AutoConfig.for_model(**raw)
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16).eval()
prompt = torch.randint(0, config.vocab_size, (1, 16), device="cuda")


print(f"transformers {__import__('transformers').__version__} torch {torch.__version__}: "
      f"{ms_per_token(model, prompt, 32):.2f} ms per output token (batch 1, bf16, {config.model_type}, {config.num_hidden_layers} layers, "
      f"{torch.cuda.get_device_name()})")
