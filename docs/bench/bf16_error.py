"""How far bf16 inference lands from fp32, measured with transformers itself: the yardstick for the
CUDA backend's tolerance against the CPU runtime (fp32). Run on the GPU machine.

  python3 docs/bench/bf16_error.py
      random Mixtral models with tst_cuda_backend's mid-size shapes (mixtral_like_spec(4096, 512, 1024,
      4, 8): weights N(0, 0.02), norms 1 + N(0, 0.02)), 8 seeds: for a 70-token prompt and 12 more
      tokens, every position's relative L2 error of the bf16 model against the fp32 one.
  python3 docs/bench/bf16_error.py DIR IDS CPU.safetensors CUDA.safetensors
      one checkpoint folder DIR and the comma-separated ids IDS that `mosaic-cli logits` ran on the
      CPU and on CUDA (files with key 'logits', [rows, vocab]): per row, Mosaic's CUDA against its CPU,
      transformers' bf16 against its fp32, and transformers' fp32 against Mosaic's CPU (a sanity check)."""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM


def rel(a, b):
    return ((a - b).norm(dim=-1) / b.norm(dim=-1)).cpu()


def random_models():
    config = MixtralConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                           num_key_value_heads=2, head_dim=64, num_local_experts=8, num_experts_per_tok=2, rope_theta=1e6,
                           rms_norm_eps=1e-5, max_position_embeddings=4096, tie_word_embeddings=False)
    for seed in range(8):
        torch.manual_seed(seed)
        with torch.device("cuda"):
            m32 = MixtralForCausalLM(config).float().eval()
        with torch.no_grad():
            for name, p in m32.named_parameters():
                p.copy_(torch.randn_like(p) * 0.02 + (1.0 if name.endswith("norm.weight") else 0.0))
            for p in m32.parameters():  # the checkpoint is bf16: both models start from the same bf16 weights
                p.copy_(p.to(torch.bfloat16).float())
            m16 = MixtralForCausalLM(config).to("cuda", torch.bfloat16).eval()
            m16.load_state_dict({k: v.to(torch.bfloat16) for k, v in m32.state_dict().items()})
            ids = torch.randint(0, 4096, (1, 82), device="cuda")
            err = rel(m16(ids).logits[0].float(), m32(ids).logits[0].float())
        print(f"seed {seed}: prompt's last {err[69]:.4f}, decode positions 70-81 max {err[70:].max():.4f} "
              f"mean {err[70:].mean():.4f}, all max {err.max():.4f}", flush=True)


def compare(folder, ids, cpu_file, cuda_file):
    ids = torch.tensor([[int(t) for t in ids.split(",")]], device="cuda")
    cpu, gpu = load_file(cpu_file)["logits"].cuda().float(), load_file(cuda_file)["logits"].cuda().float()
    with torch.no_grad():
        hf32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).cuda().eval()(ids).logits[0].float()
        hf16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()(ids).logits[0].float()
    rows = cpu.shape[0]
    ours, theirs, sanity = rel(gpu, cpu), rel(hf16[-rows:], hf32[-rows:]), rel(hf32[-rows:], cpu)
    print(f"{folder}: {rows} rows; relative error per row (median, max)")
    print(f"  Mosaic CUDA vs Mosaic CPU        {ours.median():.4f} {ours.max():.4f}")
    print(f"  transformers bf16 vs fp32        {theirs.median():.4f} {theirs.max():.4f}")
    print(f"  transformers fp32 vs Mosaic CPU  {sanity.median():.2e} {sanity.max():.2e}")
    print("  row: ours / transformers' bf16:", " ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(ours.tolist(), theirs.tolist())), flush=True)


if __name__ == "__main__":
    compare(*sys.argv[1:5]) if len(sys.argv) == 5 else random_models()
