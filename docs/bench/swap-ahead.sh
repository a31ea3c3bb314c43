#!/bin/bash
# Look-ahead swaps at Mixtral-8x7B scale, simulated (docs/benchmarks.md): four fine-tunes of
# Mixtral-8x7B (its config.json four times: the simulator reads shapes only) on the paper's A100 over
# PCIe 4, the consolidated strategy with two non-expert set buffers, without and with swap_ahead;
# one request at a time (as the paper served them) and batches of up to 8. Prints the runs' table
# and writes a report. Usage: bash docs/bench/swap-ahead.sh [OUT_DIR]  (about 3 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
cli=${MOSAIC_CLI:-build/default/app/mosaic-cli}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
for v in chat code math law; do
  mkdir -p "$out/family/$v"
  cp sample_configs/families/mixtral-8x7b/base/config.json "$out/family/$v/"
done
cp -r sample_configs/devices sample_configs/routing "$out/"
capacity=${CAPACITY:-220}  # the most 80 GiB holds beside two non-expert sets
# One sweep per batch limit, so that each report compares consolidated with consolidated+ahead alone.
for seqs in 1 8; do
  strategies=""
  for ahead in false true; do
    strategies+="${strategies:+,}
    {\"kind\": \"consolidated\", \"capacity\": $capacity, \"budget\": \"80GiB\", \"resident_sets\": 2, \"max_sequences\": $seqs, \"swap_ahead\": $ahead}"
  done
  cat > "$out/sweep-$seqs.json" <<EOF
{
  "schema": "mosaic.sweep/1",
  "description": "Look-ahead swaps at Mixtral-8x7B scale, at most $seqs sequences a step (docs/bench/swap-ahead.sh)",
  "variants": ["family/chat", "family/code", "family/math", "family/law"],
  "clock": "simulated",
  "device_profile": "devices/a100-pcie4-paper.json",
  "routing": "routing/mixtral-8x7b-published.json",
  "host_memory": {"experts": "pinned", "non_expert": "pageable"},
  "rates": [0.002, 0.05, 0.1],
  "repeats": 3,
  "seed": 1,
  "duration_seconds": 20000,
  "prompt": [20, 20],
  "output": [25, 25],
  "strategies": [$strategies
  ]
}
EOF
  rm -f "$out/runs-$seqs.sqlite"
  "$cli" bench --config "$out/sweep-$seqs.json" --db "$out/runs-$seqs.sqlite" > "$out/bench-$seqs.log"
  "$cli" report --db "$out/runs-$seqs.sqlite" --out "$out/report-$seqs" > /dev/null
  echo "== at most $seqs sequences a step (report: $out/report-$seqs/report.html)"
  column -s, -t "$out/report-$seqs/points.csv"
done
