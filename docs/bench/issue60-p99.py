#!/usr/bin/env python3
# Issue 60's p99 TTFT: one Poisson run per strategy at 0.8 x its own saturation rate (as
# issue60-saturation-a*.json measured them), through `mosaic-cli bench --json`. Run from the
# repository root after building: python3 docs/bench/issue60-p99.py SAT.json [SWEEP.json], where SAT.json
# is {"1": {"strategy name": rate, ...}, "0.5": {...}} copied from the two sweeps' "saturation" lines and
# SWEEP.json the sweep whose strategies and variants they were (default: issue60-saturation-a1.json).
import json, subprocess, sys, tempfile, os

cli = "build/default/app/mosaic-cli"
sweep_path = sys.argv[2] if len(sys.argv) > 2 else "docs/bench/issue60-saturation-a1.json"
sweep = json.load(open(sweep_path))
strategies = sweep["strategies"]
variants = [os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(sweep_path)), v)) for v in sweep["variants"]]
saturation = json.load(open(sys.argv[1]))
with tempfile.TemporaryDirectory() as tmp:
    for alpha, rates in saturation.items():
        for s in strategies:
            rate = round(0.8 * rates[s.get("name", s["kind"])], 2)
            cfg = {"schema": "mosaic.sweep/1", "variants": variants,
                   "clock": "virtual", "rates": [rate], "repeats": 1, "seed": 2, "alpha": float(alpha), "duration_seconds": 10,
                   "prompt": [20, 20], "output": [25, 25], "strategies": [s]}
            path = os.path.join(tmp, "one.json")
            json.dump(cfg, open(path, "w"))
            out = subprocess.run([cli, "bench", "--config", path, "--db", os.path.join(tmp, "p99.sqlite"), "--threads", "2", "--json"],
                                 capture_output=True, text=True, check=True).stdout
            run = json.loads(out)["runs"][0]
            print(alpha, s.get("name", s["kind"]), rate, "p99 TTFT %.3f s" % run["ttft_seconds"]["p99"],
                  "completed %.1f req/s" % (run["requests_per_minute"] / 60), flush=True)
