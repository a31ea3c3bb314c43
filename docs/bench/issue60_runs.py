# What issue60-sustained.py and issue60-interleaved.py share: one 60 s Poisson run of one strategy
# at one rate, on the virtual clock, and what it delivered.
import json, os, subprocess

SECONDS = 60
CLI = os.environ.get("MOSAIC_CLI", "build/default/app/mosaic-cli")  # MOSAIC_CLI names another mosaic-cli binary


def load_sweep(path):
    """The sweep file, and its variants' folders made absolute (they are relative to the file)."""
    sweep = json.load(open(path))
    variants = [os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), v)) for v in sweep["variants"]]
    return sweep, variants


def run_once(tmp, sweep, variants, strategy, rate):
    """Runs `strategy` at `rate` req/s for SECONDS (seed 2, 2 threads, bench --yardstick) in the folder
    `tmp`. Returns (delivered, the run's JSON summary): what it delivered over the window and the drain
    after it, against what arrived (a Poisson draw, not rate x seconds) over the window."""
    cfg = {"schema": "mosaic.sweep/1", "variants": variants, "clock": "virtual", "rates": [round(rate, 2)], "repeats": 1, "seed": 2,
           "alpha": sweep.get("alpha", 1), "duration_seconds": SECONDS, "prompt": sweep["prompt"], "output": sweep["output"],
           "strategies": [strategy]}
    path = os.path.join(tmp, "one.json")
    json.dump(cfg, open(path, "w"))
    out = subprocess.run([CLI, "bench", "--config", path, "--db", os.path.join(tmp, "runs.sqlite"), "--threads", "2", "--json", "--yardstick"],
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out)["runs"][0]
    window = r["window_seconds"]
    return (r["requests"] - r["failed"]) / r["requests"] * window / (window + r["drain_seconds"]), r


def yardstick(r):
    """The machine's matmul rates (in cache, and streaming from memory) before and after the run."""
    return "matmul %.0f -> %.0f GFLOP/s, %.1f -> %.1f GB/s" % (r["yardstick_gflops"]["before"], r["yardstick_gflops"]["after"],
                                                            r["yardstick_stream_gbytes_per_s"]["before"], r["yardstick_stream_gbytes_per_s"]["after"])
