"""Tiny DeepSeek-V2 and DeepSeek-V3 fixtures with reference outputs from transformers itself, in the
layout of the other families here (README.md): variants base, ft1, esft1 as HF checkpoint folders, a
released-format ESFT adapter (esft-released: DeepSeek's expert_cfg.json without base_model, tensors
named layers.N.… in model-00001-of-000001.safetensors with its index), and reference.safetensors with
input_ids [2, 24], logits.V [2, 24, vocab] (fp32 forward) and greedy.V [1, 22] (the first 12 ids of
row 0, then 10 greedy ids) for every variant, esft-released's being esft1's (it is esft1 over base).

Needs torch and transformers >= 5.15 (V2 multiplies the softmax scale by YaRN's mscale² from 5.15 on;
group_limited_greedy works from 5.13; V3 masks groups at -inf from 5.6): the GPU machine has them.
Run there from the repository root:  python3 tests/data/hf-tiny/make_deepseek.py OUT_DIR
then copy OUT_DIR/deepseek_v2 and OUT_DIR/deepseek_v3 into tests/data/hf-tiny/. The configs are
those of tests/test_support.cpp's deepseek_v2_config() and deepseek_v3_config(); keep them in step.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

COMMON = dict(vocab_size=320, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
              kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, intermediate_size=96,
              moe_intermediate_size=24, n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=1,
              max_position_embeddings=256, rms_norm_eps=1e-6, attention_bias=False, hidden_act="silu", bos_token_id=0,
              eos_token_id=1, tie_word_embeddings=False)
V2 = dict(COMMON, q_lora_rank=None, n_shared_experts=2, topk_method="group_limited_greedy", n_group=4, topk_group=2,
          routed_scaling_factor=2.0, norm_topk_prob=False,
          rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                               beta_fast=32.0, beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707))
V3 = dict(COMMON, q_lora_rank=24, n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
          rope_interleave=True,
          rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                               beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0))
ESFT_EXPERTS = {"1": [6, 2], "2": [0]}  # absolute decoder-layer keys, unsorted as DeepSeek's scores leave them


def make(model_cls, config_cls, fields, seed):
    torch.manual_seed(seed)
    model = model_cls(config_cls(**fields)).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.02 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02)
        for name, b in model.named_buffers():  # V3's e_score_correction_bias: some negative, so the group mask's -inf matters
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    return model


def copy_of(model):
    other = type(model)(model.config).float().eval()
    other.load_state_dict(model.state_dict())
    return other


def expert_of(name):
    """(layer key, expert id) of a routed expert's tensor, whether named in transformers 4.x (one
    module per expert) or in a checkpoint; None for any other tensor."""
    parts = name.split(".")
    if "experts" not in parts or "layers" not in parts:
        return None
    layer, expert = parts[parts.index("layers") + 1], parts[parts.index("experts") + 1]
    return (layer, int(expert)) if expert.isdigit() else None


def drift(model, seed, expert_scale, other_scale):
    """Every weight moves a little (experts more in deeper layers), as the other families' ft variants."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            layer = int(name.split(".layers.")[1].split(".")[0]) if ".layers." in name else 0
            scale = expert_scale * (1 + layer) if ".experts." in name else other_scale
            p.add_(scale * p.abs().mean() * torch.randn(p.shape, generator=g))


def tune_listed_experts(base_dir, out_dir, seed):
    """esft1: a full checkpoint in which only the listed experts differ from base, edited in the saved
    per-expert tensors (transformers 5 holds experts fused in memory, but saves them per expert)."""
    os.makedirs(out_dir, exist_ok=True)
    state = load_file(os.path.join(base_dir, "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    for name, t in state.items():
        e = expert_of(name)
        if e and e[0] in ESFT_EXPERTS and e[1] in ESFT_EXPERTS[e[0]]:
            state[name] = (t + 0.3 * t.abs().mean() * torch.randn(t.shape, generator=g)).contiguous()
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    for f in os.listdir(base_dir):
        if f.endswith(".json"):
            with open(os.path.join(base_dir, f)) as src, open(os.path.join(out_dir, f), "w") as dst:
                dst.write(src.read())


def released_adapter(esft_dir, out_dir):
    """esft1's tuned experts in DeepSeek's released layout (ESFT-gate-*-lite): v1 names, one shard, index."""
    os.makedirs(out_dir, exist_ok=True)
    state = load_file(os.path.join(esft_dir, "model.safetensors"))
    keep = {}
    for name, t in state.items():
        e = expert_of(name)
        if e and e[0] in ESFT_EXPERTS and e[1] in ESFT_EXPERTS[e[0]]:
            keep[name[len("model."):]] = t.contiguous()
    shard = "model-00001-of-000001.safetensors"
    save_file(keep, os.path.join(out_dir, shard), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in keep.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": {k: shard for k in sorted(keep)}}, f, indent=2)
    with open(os.path.join(out_dir, "expert_cfg.json"), "w") as f:
        json.dump({"experts": ESFT_EXPERTS, "shared_experts": False, "non_expert_modules": False}, f)
    with open(os.path.join(esft_dir, "config.json")) as src, open(os.path.join(out_dir, "config.json"), "w") as dst:
        dst.write(src.read())


def family(out, name, model_cls, config_cls, fields):
    root = os.path.join(out, name)
    base = make(model_cls, config_cls, fields, seed=1)
    ft1 = copy_of(base)
    drift(ft1, seed=2, expert_scale=0.05, other_scale=0.15)
    base.save_pretrained(os.path.join(root, "base"), safe_serialization=True)
    ft1.save_pretrained(os.path.join(root, "ft1"), safe_serialization=True)
    tune_listed_experts(os.path.join(root, "base"), os.path.join(root, "esft1"), seed=3)
    released_adapter(os.path.join(root, "esft1"), os.path.join(root, "esft-released"))

    torch.manual_seed(7)
    ids = torch.randint(2, fields["vocab_size"], (2, 24))
    ref = {"input_ids": ids}
    for v in ("base", "ft1", "esft1"):
        # Reloaded through transformers' own loader: what the fixture holds, not what was in memory.
        m = AutoModelForCausalLM.from_pretrained(os.path.join(root, v), dtype=torch.float32).eval()
        with torch.no_grad():
            ref["logits." + v] = m(ids).logits.float().contiguous()
            ref["greedy." + v] = m.generate(ids[:1, :12], max_new_tokens=10, min_new_tokens=10, do_sample=False,
                                            eos_token_id=None, pad_token_id=0).contiguous()
    ref["logits.esft-released"] = ref["logits.esft1"].clone()  # DeepSeek's adapter over base is esft1 itself; safetensors refuses shared storage
    ref["greedy.esft-released"] = ref["greedy.esft1"].clone()
    save_file(ref, os.path.join(root, "reference.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print(f"{name}: transformers {transformers.__version__}, torch {torch.__version__}; wrote {root}")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "deepseek-fixtures"
    family(out, "deepseek_v2", DeepseekV2ForCausalLM, DeepseekV2Config, V2)
    family(out, "deepseek_v3", DeepseekV3ForCausalLM, DeepseekV3Config, V3)
