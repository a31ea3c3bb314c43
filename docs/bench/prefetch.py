#!/usr/bin/env python3
"""Prefetching the next layer's experts, on the sample family (docs/benchmarks.md).

Four fine-tunes of the sample family served together, a round-robin consolidated layout of 16
resident experts (of 32 positions), a budget that leaves S spare slots a layer beside it (S = 1, 2,
4). Each fine-tune continues up to three paragraphs of its own held-out text (greedy, 48 new
tokens), one request at a time, under
the lru miss policy, under prefetch-always (lru, and while a layer computes, the experts the next
layer's router picks for this layer's input are copied into its spare slots) and under prefetch (the
same where the prefetch gate judges that predictions pay). Prints, per S and
policy: the pairs that missed, the loads a layer waited for (the misses' copies, on the critical
path on any device), the prefetches and the share of them a pair then hit, the bytes each moved,
and TPOT. On the CPU a prefetch's copy is not hidden (no copy engine): what this measures is the
predictor, and how many loads leave the critical path where a copy engine can hide them.

Usage: python3 docs/bench/prefetch.py [--cli build/default/app/mosaic-cli]  (about 3 minutes on 2 cores)
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAMILY = os.path.join(ROOT, "resources", "sample-family")
TARGETS = ["bible", "fortunes", "jargon", "c-headers"]
EXPERT_BYTES = 3 * 192 * 128 * 2  # one expert of the sample family in bf16, as the budget prices it
SPARSE_LAYERS = 4


def passages(domain, count=3, chars=240):
    """The first `count` paragraphs of a held-out text, cut to `chars` characters at a word."""
    with open(os.path.join(FAMILY, "heldout", domain + ".txt"), encoding="utf-8") as f:
        paras = [p.strip() for p in f.read().split("\n\n") if len(p.strip()) > 80]
    out = []
    for p in paras[:count]:
        p = " ".join(p.split())
        out.append(p[:chars].rsplit(" ", 1)[0])
    return out


def generate(cli, target, prompt, miss, budget, stats):
    args = [cli, "generate", "--variants"] + [os.path.join(FAMILY, t) for t in TARGETS]
    args += ["--capacity", "16", "--target", target, "--miss", miss, "--prompt", prompt, "--max-new", "48", "--stats", stats]
    if budget is not None:
        args += ["--budget", str(budget)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(stats) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "default", "app", "mosaic-cli"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    stats = os.path.join(tmp, "stats.json")
    # What the device holds without spare slots: the layout, one non-expert set, the reserve.
    floor = generate(a.cli, "bible", "In the beginning", "transient", None, stats)["budget"]["used"]
    asks = [(t, p) for t in TARGETS for p in passages(t)]
    print(f"{len(asks)} requests (up to 3 held-out paragraphs per fine-tune, 48 new tokens each), capacity 16, budget = floor {floor} B + spare slots")
    print(f"{'spare':>5} {'policy':>15} {'pairs':>6} {'missed':>6} {'loads':>5} {'load MB':>7} {'prefetch':>8} {'used':>5} {'pf MB':>6} {'TPOT ms':>7}")
    for spare in (1, 2, 4):
        budget = floor + spare * SPARSE_LAYERS * EXPERT_BYTES
        for miss in ("lru", "prefetch", "prefetch-always"):
            pairs = missed = loads = prefetches = used = 0
            load_bytes = prefetch_bytes = 0
            tpot = []
            for target, prompt in asks:
                r = generate(a.cli, target, prompt, miss, budget, stats)["requests"][0]
                pairs += r["hits"] + r["misses"]
                missed += r["misses"]
                loads += r["loads"]
                load_bytes += r["load_bytes"]
                prefetches += r.get("prefetches", 0)
                used += r.get("prefetch_used", 0)
                prefetch_bytes += r.get("prefetch_bytes", 0)
                tpot.append(r["tpot_seconds"])
            share = f"{used / prefetches:.0%}" if prefetches else "-"
            print(f"{spare:>5} {miss:>15} {pairs:>6} {missed:>6} {loads:>5} {load_bytes / 1e6:>7.1f} {prefetches:>8} {share:>5} "
                  f"{prefetch_bytes / 1e6:>6.1f} {1e3 * sum(tpot) / len(tpot):>7.3f}")


if __name__ == "__main__":
    main()
