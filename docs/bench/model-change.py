#!/usr/bin/env python3
"""What a model change costs while serving (issue 60 #7), on the sample family (docs/benchmarks.md).

`mosaic-cli serve --allow-model-changes` serves base and bible (capacity 16, strict hits, so the
streams' tokens cannot change); 4 clients stream bible continuously (ignore_eos, 300 tokens each,
restarted when done). After a quiet period, `POST /v1/models` adds fortunes; the script times the
change to "ready" and to fortunes' first streamed token, then `DELETE`s it and times that. Gaps
between a bible stream's events are bucketed: before the first change, within each change (from
its request to its model served / removed, plus 0.2 s), and after. Prints one JSON object.

Usage: python3 docs/bench/model-change.py [--cli build/default/app/mosaic-cli] [--repeats 5]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAMILY = os.path.join(ROOT, "resources", "sample-family")


def call(url, method="GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def stream_gaps(base, model, tokens, stop, gaps):
    """Streams `model` until `stop` is set, recording (time, gap) between events."""
    body = json.dumps({"model": model, "prompt": "In the beginning", "max_tokens": tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    while not stop.is_set():
        req = urllib.request.Request(base + "/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            last = None
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                now = time.monotonic()
                if last is not None:
                    gaps.append((now, now - last))
                last = now


def first_token(base, model):
    t0 = time.monotonic()
    body = json.dumps({"model": model, "prompt": "You will", "max_tokens": 4, "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(base + "/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if line.startswith(b"data: "):
                return time.monotonic() - t0
    return None


def until(base, model, want):
    while True:
        status, j = call(f"{base}/models/{model}")
        if j.get("status") in (want, "failed"):
            return j.get("status")
        time.sleep(0.005)


def summary(values):
    if not values:
        return None
    v = sorted(values)
    return {"n": len(v), "mean_ms": 1e3 * statistics.fmean(v), "p99_ms": 1e3 * v[min(len(v) - 1, int(0.99 * len(v)))], "max_ms": 1e3 * v[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "default", "app", "mosaic-cli"))
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    env = dict(os.environ, MOSAIC_CACHE_DIR=tempfile.mkdtemp())
    args = [a.cli, "serve", "--variants", os.path.join(FAMILY, "base"), os.path.join(FAMILY, "bible"), "--capacity", "16",
            "--hit", "strict", "--port", "0", "--allow-model-changes"]
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        line = server.stdout.readline()
        base = re.search(r"(http://\S+/v1)", line).group(1)
        # fortunes analysed once first, as any folder the cache has seen: the runs time the change, not a first hashing
        call(base + "/models", "POST", {"id": "fortunes", "path": os.path.join(FAMILY, "fortunes")})
        until(base, "fortunes", "ready")
        call(f"{base}/models/fortunes", "DELETE")
        until(base, "fortunes", "removed")

        stop = threading.Event()
        gaps = []
        clients = [threading.Thread(target=stream_gaps, args=(base, "bible", 300, stop, gaps)) for _ in range(4)]
        for c in clients:
            c.start()
        time.sleep(2.0)
        windows, ready, first, removed = [], [], [], []
        for _ in range(a.repeats):
            t0 = time.monotonic()
            call(base + "/models", "POST", {"id": "fortunes", "path": os.path.join(FAMILY, "fortunes")})
            assert until(base, "fortunes", "ready") == "ready"
            t1 = time.monotonic()
            ready.append(t1 - t0)
            first.append(t1 - t0 + first_token(base, "fortunes"))
            windows.append((t0, t1 + 0.2))
            time.sleep(0.5)
            t2 = time.monotonic()
            call(f"{base}/models/fortunes", "DELETE")
            assert until(base, "fortunes", "removed") == "removed"
            t3 = time.monotonic()
            removed.append(t3 - t2)
            windows.append((t2, t3 + 0.2))
            time.sleep(0.5)
        stop.set()
        for c in clients:
            c.join()
        start = windows[0][0]
        before = [g for t, g in gaps if t < start]
        during = [g for t, g in gaps if any(w0 <= t <= w1 for w0, w1 in windows)]
        between = [g for t, g in gaps if t >= start and not any(w0 <= t <= w1 for w0, w1 in windows)]
        print(json.dumps({
            "repeats": a.repeats,
            "add_to_ready_s": summary(ready),
            "add_to_first_token_s": summary(first),
            "remove_s": summary(removed),
            "bible_stream_gaps": {"before": summary(before), "during_changes": summary(during), "between_changes": summary(between)},
        }, indent=2))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
