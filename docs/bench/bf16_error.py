"""How far bf16 inference lands from fp32 on the synthetic family of tst_cuda_backend's
decodeStepsOnASyntheticMidSizeFamily (mixtral_like_spec(4096, 512, 1024, 4, 8): weights N(0, 0.02),
norms 1 + N(0, 0.02)), measured with transformers itself: the yardstick for that test's tolerance.
For each seed: a 70-token prompt and 12 more tokens, every position's logits, relative L2 error of the
bf16 model against the fp32 one (the test's relative_error). Run on the GPU machine:
python3 docs/bench/bf16_error.py"""
import torch
from transformers import MixtralConfig, MixtralForCausalLM

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
        # The checkpoint is bf16: both models start from the same bf16-rounded weights.
        for p in m32.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        m16 = MixtralForCausalLM(config).to("cuda", torch.bfloat16).eval()
        m16.load_state_dict({k: v.to(torch.bfloat16) for k, v in m32.state_dict().items()})
        ids = torch.randint(0, 4096, (1, 82), device="cuda")
        a, b = m32(ids).logits[0].float(), m16(ids).logits[0].float()
        err = ((b - a).norm(dim=-1) / a.norm(dim=-1)).cpu()
    print(f"seed {seed}: prompt's last {err[69]:.4f}, decode positions 70-81 max {err[70:].max():.4f} mean {err[70:].mean():.4f}, all max {err.max():.4f}", flush=True)
