"""Where Mosaic's CUDA logits part from its CPU's: the same checkpoint with parts of its layers switched
off, each served by `mosaic-cli logits` on the CPU and on CUDA, beside transformers' bf16 against its fp32
on the same folder. A part whose switching-off takes most of the gap away is where the gap comes from.
Run on the GPU machine (gpu-session.sh diagnose):

  python3 docs/bench/bf16_ablate.py CLI DIR IDS WORKDIR

CLI: mosaic-cli; DIR: a Mixtral checkpoint folder (config.json, model.safetensors); IDS: comma-separated
prompt ids; WORKDIR: where the ablated copies and their logits are written.
  full      as written
  no-moe    every expert's down projection zero: the MoE block adds nothing (the router still runs)
  no-attn   every o_proj zero: attention adds nothing
  neither   both: the logits are the head over the final norm of the embedding
  one-token the full model on the prompt's first id alone (no attention across positions)"""
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file


def rel(a, b):
    return ((a - b).norm(dim=-1) / b.norm(dim=-1)).cpu()


def is_down(name):
    return ".experts." in name and (".w2." in name or "down_proj" in name)


ABLATIONS = {
    "full": lambda name: False,
    "no-moe": is_down,
    "no-attn": lambda name: "o_proj" in name,
    "neither": lambda name: is_down(name) or "o_proj" in name,
}


def write_ablated(src, dst, zero):
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), dst)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    zeroed = 0
    for name in tensors:
        if zero(name):
            tensors[name] = torch.zeros_like(tensors[name])
            zeroed += 1
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return zeroed


def mosaic_logits(cli, folder, ids, device, out):
    subprocess.run([cli, "logits", "--model", folder, "--ids", ids, "--device", device, "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    return load_file(out)["logits"].cuda().float()


def transformers_gap(folder, ids, rows):
    """transformers' bf16 against its fp32, and its fp32 against nothing else: None if it cannot load the folder."""
    try:
        from transformers import AutoModelForCausalLM
        t = torch.tensor([[int(i) for i in ids.split(",")]], device="cuda")
        with torch.no_grad():
            hf32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).cuda().eval()(t).logits[0].float()
            hf16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()(t).logits[0].float()
        return hf32[-rows:], hf16[-rows:]
    except Exception as e:  # the comparison of Mosaic's two devices stands without it
        print(f"  (transformers could not serve {folder}: {type(e).__name__}: {e})", flush=True)
        return None


def main(cli, src, ids, work):
    print(f"{src}, {len(ids.split(','))} prompt ids; relative L2 error per row: median / max", flush=True)
    print(f"  {'ablation':10} {'zeroed':>6} {'rows':>4}  {'CUDA vs CPU':>17}  {'hf bf16 vs fp32':>17}  {'hf fp32 vs CPU':>17}", flush=True)
    cases = [(name, zero, ids) for name, zero in ABLATIONS.items()] + [("one-token", ABLATIONS["full"], ids.split(",")[0])]
    for name, zero, prompt in cases:
        folder = os.path.join(work, name if name != "one-token" else "full")
        zeroed = write_ablated(src, folder, zero) if name != "one-token" else 0
        cpu = mosaic_logits(cli, folder, prompt, "cpu", os.path.join(work, f"{name}-cpu.safetensors"))
        gpu = mosaic_logits(cli, folder, prompt, "cuda", os.path.join(work, f"{name}-cuda.safetensors"))
        ours = rel(gpu, cpu)
        line = f"  {name:10} {zeroed:6d} {cpu.shape[0]:4d}  {ours.median():8.4f} {ours.max():8.4f}"
        hf = transformers_gap(folder, prompt, cpu.shape[0])
        if hf:
            theirs, sanity = rel(hf[1], hf[0]), rel(hf[0], cpu)
            line += f"  {theirs.median():8.4f} {theirs.max():8.4f}  {sanity.median():8.2e} {sanity.max():8.2e}"
        print(line, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:5])
