"""transformers' generate timed per output token at batch 1 (greedy, on the GPU): the difference of a
long and a one-token generation, each the best of 3 after a warm-up, so that the prompt's prefill
cancels. Shared by transformers_decode.py and transformers_deepseek_decode.py."""
import time

import torch


def ms_per_token(model, prompt, tokens=64):
    def run(new_tokens):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    with torch.no_grad():
        run(8)  # warm-up
        short, long = min(run(1) for _ in range(3)), min(run(tokens + 1) for _ in range(3))
    return (long - short) / tokens * 1e3
