#!/usr/bin/env python3
# One strategy setting against others, in interleaved runs: for each STRATEGY@RATE given, one 60 s
# run per value of FIELD, back to back on the same seed, so that this machine's drift over an hour
# (a virtual clock charges measured compute) touches every value alike. Prints, per run, what was
# delivered over the window and the drain after it (as issue60-sustained.py counts it), TTFT, TPOT,
# preemptions, swaps, and the machine's matmul rates before and after the run (bench --yardstick):
# where they differ, so did the machine (the converse does not hold: docs/benchmarks.md, 2026-11-29).
# Run from the repository root after building:
#   python3 docs/bench/issue60-interleaved.py SWEEP.json FIELD=V1,V2,... "STRATEGY@RATE" ...
# e.g. kv_admission=greedy,reserve "single-resident@36", or max_wait_seconds=1,2 "consolidated (defaults)@18".
# SWEEP.json names the variants, workload and strategies (e.g. issue60-sustained-50m.json); a value
# that reads as JSON (a number, true) is set as such, else as a string. MOSAIC_CLI names another
# mosaic-cli binary.
import json, os, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from issue60_runs import load_sweep, run_once, yardstick

if len(sys.argv) < 4 or "=" not in sys.argv[2]:
    sys.exit("usage: issue60-interleaved.py SWEEP.json FIELD=V1,V2,... STRATEGY@RATE ...")
sweep_path = sys.argv[1]
sweep, variants = load_sweep(sweep_path)
field, _, values_text = sys.argv[2].partition("=")


def value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


values = [value(v) for v in values_text.split(",")]
by_name = {s.get("name", s["kind"]): s for s in sweep["strategies"]}
pairs = []
for arg in sys.argv[3:]:
    name, _, rate = arg.rpartition("@")
    if name not in by_name:
        sys.exit("%s: no strategy named '%s' in %s (it has: %s)" % (arg, name, sweep_path, ", ".join(by_name)))
    pairs.append((name, float(rate)))

with tempfile.TemporaryDirectory() as tmp:
    for name, rate in pairs:
        for v in values:
            strategy = dict(by_name[name])
            strategy[field] = v
            kept, r = run_once(tmp, sweep, variants, strategy, rate)
            print("%-40s %6.1f req/s  %s=%-8s  arrived %4d  delivered %.3f  drain %5.1f s  TTFT p50 %.3f p99 %.3f s  TPOT p50 %.3f p99 %.3f s  preemptions %d  swaps %d  %s" %
                  (name, rate, field, json.dumps(v), r["requests"], kept, r["drain_seconds"], r["ttft_seconds"]["p50"],
                   r["ttft_seconds"]["p99"], r["tpot_seconds"]["p50"], r["tpot_seconds"]["p99"], r["preemptions"], r["swaps"],
                   yardstick(r)), flush=True)
