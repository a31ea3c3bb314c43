#!/usr/bin/env python3
# One strategy setting against others, in interleaved runs: for each STRATEGY@RATE given, one 60 s
# run per value of FIELD, back to back on the same seed, so that this machine's drift over an hour
# (a virtual clock charges measured compute) touches every value alike. Prints, per run, what was
# delivered over the window and the drain after it (as issue60-sustained.py counts it), TTFT, TPOT,
# preemptions, swaps, and the machine's matmul rate before and after the run (bench --yardstick):
# pairs whose rates differ by more than a few percent were run on a different machine.
# Run from the repository root after building:
#   python3 docs/bench/issue60-interleaved.py SWEEP.json FIELD=V1,V2,... "STRATEGY@RATE" ...
# e.g. kv_admission=greedy,reserve "single-resident@36", or max_wait_seconds=1,2 "consolidated (defaults)@18".
# SWEEP.json names the variants, workload and strategies (e.g. issue60-sustained-50m.json); a value
# that reads as JSON (a number, true) is set as such, else as a string. MOSAIC_CLI names another
# mosaic-cli binary.
import json, os, subprocess, sys, tempfile

SECONDS = 60
cli = os.environ.get("MOSAIC_CLI", "build/default/app/mosaic-cli")
if len(sys.argv) < 4 or "=" not in sys.argv[2]:
    sys.exit(__doc__ or "usage: issue60-interleaved.py SWEEP.json FIELD=V1,V2,... STRATEGY@RATE ...")
sweep_path = sys.argv[1]
sweep = json.load(open(sweep_path))
variants = [os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(sweep_path)), v)) for v in sweep["variants"]]
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
            cfg = {"schema": "mosaic.sweep/1", "variants": variants, "clock": "virtual", "rates": [rate], "repeats": 1, "seed": 2,
                   "alpha": sweep.get("alpha", 1), "duration_seconds": SECONDS, "prompt": sweep["prompt"], "output": sweep["output"],
                   "strategies": [strategy]}
            path = os.path.join(tmp, "one.json")
            json.dump(cfg, open(path, "w"))
            out = subprocess.run([cli, "bench", "--config", path, "--db", os.path.join(tmp, "runs.sqlite"), "--threads", "2", "--json", "--yardstick"],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out)["runs"][0]
            window = r["window_seconds"]
            kept = (r["requests"] - r["failed"]) / r["requests"] * window / (window + r["drain_seconds"])
            print("%-40s %6.1f req/s  %s=%-8s  arrived %4d  delivered %.3f  drain %5.1f s  TTFT p50 %.3f p99 %.3f s  TPOT p50 %.3f p99 %.3f s  preemptions %d  swaps %d  matmul %.1f -> %.1f GFLOP/s" %
                  (name, rate, field, json.dumps(v), r["requests"], kept, r["drain_seconds"], r["ttft_seconds"]["p50"],
                   r["ttft_seconds"]["p99"], r["tpot_seconds"]["p50"], r["tpot_seconds"]["p99"], r["preemptions"], r["swaps"],
                   r["yardstick_gflops"]["before"], r["yardstick_gflops"]["after"]), flush=True)
