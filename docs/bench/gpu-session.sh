#!/usr/bin/env bash
# What a session with the GPU machine runs, in stages that each fit one `run` call (10 minutes), so the
# device time a session gets (30 minutes once, 15 since 2026-11-27, start and build included) goes to
# measuring rather than to typing. With 15 minutes: `quick mixtral` in one call (a fresh machine's
# build takes about 105 s), then give the machine back.
#
# Here, first:   bash docs/bench/gpu-session.sh prepare
#   gathers the build's Debian packages into .device/ (../shared/device/prepare.sh) and a tokenizer for
#   the synthetic family, and takes resources/ (32 MB) out of git's index: the working tree that
#   travels holds 64 MiB, and the tracked files alone are 60 MB. Nothing on the device needs them.
# There, one `run` each, `carry: [".device"]`, from the project root (MOSAIC_GPU_DEADLINE: below).
# With 15 minutes of device time, one call instead:  MOSAIC_GPU_DEADLINE=$(($(date +%s)+545)) bash .device/build.sh -- bash docs/bench/gpu-session.sh quick
#   and then, on the warm machine:  MOSAIC_GPU_DEADLINE=$(($(date +%s)+400)) bash .device/build.sh -- bash docs/bench/gpu-session.sh qos   # issue 20's QoS sweep, 4 layers
#   MOSAIC_GPU_DEADLINE=$(($(date +%s)+585)) bash .device/build.sh -- bash docs/bench/gpu-session.sh check   # gpu tests, sanitizers, a sweep and a session on CUDA
#   MOSAIC_GPU_DEADLINE=$(($(date +%s)+585)) bash .device/build.sh -- bash docs/bench/gpu-session.sh bench   # bench-cuda, transformers, bench-device --device cuda
#   MOSAIC_GPU_DEADLINE=$(($(date +%s)+585)) bash .device/build.sh -- bash docs/bench/gpu-session.sh serve   # HTTP overhead, the QoS sweep on the GPU
# Here, last (before any commit):   bash docs/bench/gpu-session.sh restore
#
# A stage brings back at most 8 files (the device's limit): summary.txt (step, exit code, seconds, and
# the tail of each failed step), <stage>-logs.tar.gz (every step's whole log) and its result JSONs. A
# failed step does not stop the stage: one call brings back everything it can. The synthetic families
# (2 × 9.5 GB each) are written into build-gpu/, which the device keeps between calls while warm.
set -uo pipefail
stage=${1:?"which stage: prepare, quick, diagnose, mixtral, mixtral-qos, deepseek, deltas, qos, check, bench, serve or restore (several run in turn in one call)"}

case $stage in
  prepare)
    set -e
    cd "$(git rev-parse --show-toplevel)"
    git diff --cached --quiet || { echo "commit or unstage what is staged first: prepare changes git's index" >&2; exit 1; }
    # cpp-httplib.pc requires libbrotli*; tokenizer.json's Split patterns need PCRE2's and ICU's
    # headers, .pc files and .so links (their runtime libraries are in prepare.sh's list).
    bash ../shared/device/prepare.sh libbrotli-dev libbrotli1 libpcre2-dev libicu-dev
    cp resources/sample-family/base/tokenizer.json .device/tokenizer.json  # 1,024 ids: valid in the family's 32,000
    git rm -r -q --cached resources
    grep -qx '/resources/' .git/info/exclude || echo '/resources/' >>.git/info/exclude
    # A commit now would delete resources/ from the history's next tree: refuse it until restore.
    hooks=$(git rev-parse --git-path hooks)
    mkdir -p "$hooks"
    if [[ ! -e $hooks/pre-commit ]]; then
      printf '%s\n' '#!/bin/sh' 'echo "resources/ is out of the index (gpu-session.sh prepare): run bash docs/bench/gpu-session.sh restore first" >&2' 'exit 1' >"$hooks/pre-commit"
      chmod +x "$hooks/pre-commit"
      touch "$hooks/pre-commit.gpu-session"
    fi
    echo "resources/ is out of the index until: bash docs/bench/gpu-session.sh restore (before any commit)"
    exit 0 ;;
  restore)
    set -e
    cd "$(git rev-parse --show-toplevel)"
    sed -i '\#^/resources/$#d' .git/info/exclude
    git reset -q -- resources
    hooks=$(git rev-parse --git-path hooks)
    if [[ -e $hooks/pre-commit.gpu-session ]]; then rm -f "$hooks/pre-commit" "$hooks/pre-commit.gpu-session"; fi
    [[ -z $(git status --short -- resources) ]] && echo "resources/ is tracked again"
    exit 0 ;;
esac

out=${OUT:-gpu-out}
logs=$(mktemp -d)
cli=build-gpu/app/mosaic-cli
family=build-gpu/bench-cuda-family
results=()

# The `run` call's own limit kills everything at 600 s, so a stage stops its steps before it:
# MOSAIC_GPU_DEADLINE (seconds since the epoch, set when the call starts: the build comes out of the
# same 600 s) caps every step, a step with under 20 s left is skipped, and the summary and the logs
# are rewritten after every step, so what ran comes back even if the call is cut off.
deadline=${MOSAIC_GPU_DEADLINE:-$(($(date +%s) + 580))}

# step NAME LIMIT_SECONDS COMMAND…: runs it under a time limit, its output to NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  if ((left < 20)); then
    results+=("$(printf '%-20s skipped: %d s left of the call' "$name" "$left")")
    publish
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  echo "== $name: $*"
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  results+=("$(printf '%-20s rc %3d  %5d s  (limit %d s)' "$name" "$rc" $((SECONDS - t0)) "$limit")")
  if ((rc != 0)); then
    results+=("$(tail -n 15 "$logs/$name.log" | sed 's/^/    /')")
  fi
  publish
  return 0
}

publish() {
  printf '%s\n' "${results[@]}" >"$out/summary.txt"
  tar -czf "$out/$(IFS=-; echo "${stages[*]}")-logs.tar.gz" -C "$logs" .
}

# qos_sweep FAMILY CAPACITY: Multi-MoE's QoS experiment on the GPU over FAMILY's two variants, CAPACITY
# expert positions of a variant's resident (part of two variants' experts), the rates from each
# strategy's saturation, then the report. Kept to 3 rates of 10 s: 4 rates of 20 s did not finish one
# strategy of the 16-layer family in 400 s (2026-11-26).
qos_sweep() {
  local family=$1 capacity=$2
  cat >"$out/qos-cuda.json" <<EOF
{"schema": "mosaic.sweep/1", "description": "QoS on the GPU: a synthetic Mixtral family, part of two variants' experts resident",
 "variants": ["$PWD/$family/variant-0", "$PWD/$family/variant-1"], "device": "cuda", "clock": "virtual",
 "rates": {"saturation": {"points": 3, "from": 0.25, "to": 1.5}}, "duration_seconds": 10, "prompt": [20, 20], "output": [25, 25],
 "strategies": [{"kind": "single", "capacity": $capacity}, {"kind": "consolidated", "capacity": $capacity},
                {"kind": "space-sharing", "capacity": $capacity}, {"kind": "time-sharing"}]}
EOF
  step qos-cuda 400 "$cli" bench --config "$out/qos-cuda.json" --db "$logs/qos-cuda.sqlite"
  step qos-report 60 "$cli" report --db "$logs/qos-cuda.sqlite" --out "$logs/qos-report"
  cp "$logs/qos-report/points.csv" "$out/qos-points.csv" 2>/dev/null
}

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
mkdir -p "$out"
stages=("$@")  # e.g. `diagnose mixtral`: one call, one deadline, one summary
for stage in "${stages[@]}"; do
case $stage in
  check)
    step nvidia-smi 30 nvidia-smi
    step ctest-gpu 300 ctest --test-dir build-gpu -L gpu --output-on-failure
    # The CUDA branches of CPU-labelled suites: a sweep and a session served on the GPU.
    step serving-on-cuda 240 build-gpu/tests/tst_serving aSweepNamesTheDeviceItsEngineRunsOn sessionServesWithinItsBudget
    step memcheck-kernels 300 "$sanitizer" --tool memcheck --error-exitcode 1 build-gpu/tests/tst_cuda_kernels
    step racecheck-kernels 300 "$sanitizer" --tool racecheck --error-exitcode 1 build-gpu/tests/tst_cuda_kernels
    # The backend suite provokes one out-of-memory on purpose: its log says whether anything else was found.
    step memcheck-backend 400 "$sanitizer" --tool memcheck build-gpu/tests/tst_cuda_backend
    ;;
  quick)
    # For a session lent 15 minutes of device time, start included: one call, correctness first, then
    # the measures. Since the sixth run (2026-11-30, H200) these were written without a GPU and have
    # run only on simt and the CPU: the tensor-core grouped experts (kernels/moe_experts_tc.cu), every
    # step of up to 1024 pairs routed on the device (CudaOptions::device_route_pairs, tensor_core_experts:
    # off by default until this run measures them), prompt tiles on tensor cores
    # (kernels/paged_attention_tc.cu, CudaOptions::tensor_core_attention, off likewise), and the
    # mid-size test's family routing to all 8 experts (the sixth run's diagnosis). bench-cuda-4l's
    # batched section times the three ways, its prefill section the four.
    step nvidia-smi 20 nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    step ctest-gpu 200 ctest --test-dir build-gpu -L gpu --output-on-failure
    # Since 2026-11-30's second session: DeepSeek-V2/V3 on CUDA (issue 58), also written blind — its
    # kernels below, and tst_cuda_backend's deepseekFamiliesAsOnTheCpuAndTransformers in ctest-gpu.
    # Since 2026-11-30's fourth session: the delta kernel on tiles (issue 61 #5), timed by bench-cuda's
    # "delta expert" table against the bf16 GEMV (here at the 4-layer family's shapes, in `mixtral` at
    # Mixtral's).
    newk="groupedExpertsOnTensorCoresMatchTheirReference routedExpertsMatchReference tiledPromptAttentionMatchesReference deepseekRoutersMatchReference latentAttentionMatchesReference importanceAddMatchesReference deltaLinearMatchesReference"
    step memcheck-new-kern 90 "$sanitizer" --tool memcheck --error-exitcode 1 build-gpu/tests/tst_cuda_kernels $newk
    step racecheck-new-kern 90 "$sanitizer" --tool racecheck --error-exitcode 1 build-gpu/tests/tst_cuda_kernels $newk
    step synccheck-new 60 "$sanitizer" --tool synccheck --error-exitcode 1 build-gpu/tests/tst_cuda_kernels groupedExpertsOnTensorCoresMatchTheirReference tiledPromptAttentionMatchesReference deltaLinearMatchesReference
    # A 4-layer family: the batched section's three ways, the prefill, the draws.
    step bench-cuda-4l 240 "$cli" bench-cuda --dir build-gpu/bench-cuda-4l --layers 4 --json "$out/bench-cuda-4l.json"
    step memcheck-new 150 "$sanitizer" --tool memcheck build-gpu/tests/tst_cuda_backend decodeStepsOnASyntheticMidSizeFamily
    step memcheck-deepseek 120 "$sanitizer" --tool memcheck build-gpu/tests/tst_cuda_backend "deepseekFamiliesAsOnTheCpuAndTransformers:deepseek_v3, fused"
    # Since 2026-11-30's third session: SwapMoE on CUDA (issue 61 #1-3), run on simt only so far.
    step memcheck-virtual 60 "$sanitizer" --tool memcheck build-gpu/tests/tst_cuda_backend virtualExpertsOnTheDevice
    ;;
  deepseek)
    # Issue 58 #11: DeepSeek-V2-Lite's own shapes (27 layers, about 31 GB bf16) and 8 ESFT adapters in
    # DeepSeek's released format, each tuning 10 % of every MoE layer's experts (about 2.9 GB each),
    # written on the device and served on CUDA: batch-1 decode against its floor, TPOT of batches over
    # 1-8 adapters against the base alone, the latent cache against full K/V. transformers' generate
    # on the same shapes first. About 6 minutes after a warm build; the family is deleted after.
    d=build-gpu/deepseek-lite
    # 8 adapters need about 53 GB written (base 31.4, 2.7 each): with less free, 4 (the log says so).
    free_gb=$(df --output=avail -BG build-gpu | tail -1 | tr -dc 0-9)
    adapters=8
    ((free_gb < 58)) && adapters=4 && echo "deepseek: ${free_gb} GB free on the disk: 4 adapters, not 8" | tee "$logs/deepseek-disk.log"
    step transformers-deepseek 150 env PYTHONUNBUFFERED=1 python3 docs/bench/transformers_deepseek_decode.py
    step bench-esft 420 "$cli" bench-esft --device cuda --adapters "$adapters" --dir "$d" --json "$out/bench-esft.json"
    rm -rf "$d"
    ;;
  deltas)
    # Issue 61 #6: DeltaMoE's serving claim on the GPU. A base and 4 variants of bench-cuda's default
    # layer shapes at 4 layers (1.28 B parameters, 2.56 GB bf16 each, 12.8 GB on disk) served as delta folders against
    # the full variants, all resident and under the deltas' device bytes, at batch 1 and 32; then
    # bench-cuda's delta-expert table at Mixtral-8x7B's shapes comes from the `mixtral` stage. About
    # 4 minutes after a warm build; the family is deleted after.
    d=build-gpu/deltas-family
    step bench-deltas 400 "$cli" bench-deltas --device cuda --hidden 2048 --intermediate 5632 --layers 4 --vocab 32000 --variants 4 \
      --batches 1 32 --dir "$d" --json "$out/bench-deltas.json"
    rm -rf "$d"
    ;;
  diagnose)
    # The 2026-11-30 run: decodeStepsOnASyntheticMidSizeFamily's CUDA logits were 2.0-2.8 % from the CPU's
    # (bound 2 %) in every configuration, fused or not, where transformers' own bf16 lands 0.7-1.7 % from
    # its fp32 on random models of those shapes. Same weights and prompt here: Mosaic's CUDA against its
    # CPU beside transformers' bf16 against its fp32, at 4 layers and at 1 (where the error starts).
    ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(2, 4096)) for _ in range(70)))")
    for layers in 4 1; do
      d=build-gpu/diagnose-$layers
      step "write-$layers" 60 "$cli" bench-cuda --dir "$d" --hidden 512 --intermediate 1024 --layers "$layers" --vocab 4096 --write-only
      step "cpu-$layers" 60 "$cli" logits --model "$d/variant-0" --ids "$ids" --device cpu --out "$logs/cpu-$layers.safetensors"
      step "cuda-$layers" 60 "$cli" logits --model "$d/variant-0" --ids "$ids" --device cuda --out "$logs/cuda-$layers.safetensors"
      step "compare-$layers" 90 env PYTHONUNBUFFERED=1 python3 docs/bench/bf16_error.py "$d/variant-0" "$ids" "$logs/cpu-$layers.safetensors" "$logs/cuda-$layers.safetensors"
    done
    step random-models 90 env PYTHONUNBUFFERED=1 python3 docs/bench/bf16_error.py
    # Added 2026-11-30 (sixth run): the 1-layer checkpoint with its MoE block, its attention or both
    # switched off, Mosaic's CUDA against its CPU beside transformers' bf16 against its fp32.
    step ablate-1 120 env PYTHONUNBUFFERED=1 python3 docs/bench/bf16_ablate.py "$cli" build-gpu/diagnose-1/variant-0 "$ids" build-gpu/ablate-1
    step ablate-4 120 env PYTHONUNBUFFERED=1 python3 docs/bench/bf16_ablate.py "$cli" build-gpu/diagnose-4/variant-0 "$ids" build-gpu/ablate-4
    ;;
  mixtral)
    # Issue 59 #8, its first part: Mixtral-8x7B's own layer shapes (hidden 4096, 8 experts of 14336,
    # 32 heads, 8 KV heads, vocab 32000) at 2 layers (2 × 5.9 GB), every part of bench-cuda against
    # its floor, and transformers' generate on the same shapes and depth in the same run. The family
    # is deleted after: the disk is 64 GB.
    m=build-gpu/mixtral-2l
    # transformers first: bench-cuda prints its batch-1 decode first, and whatever the deadline cuts off
    # after that is the less wanted part.
    step transformers-mixtral-2l 100 env PYTHONUNBUFFERED=1 python3 docs/bench/transformers_decode.py 2 4096 14336 32 8
    step bench-mixtral-2l 240 "$cli" bench-cuda --dir "$m" --hidden 4096 --intermediate 14336 --heads 32 --kv-heads 8 --layers 2 --json "$out/bench-mixtral-2l.json"
    rm -rf "$m"
    ;;
  bench)
    step bench-cuda 400 "$cli" bench-cuda --dir "$family" --json "$out/bench-cuda.json"
    step transformers 300 env PYTHONUNBUFFERED=1 python3 docs/bench/transformers_decode.py
    step bench-device 400 "$cli" bench-device --device cuda --dir build-gpu/bench-device-family --out "$out/h100-measured.json"
    ;;
  serve)
    # Its own family with the sample tokenizer's 1,024 ids as the vocabulary: every id the model samples
    # then has text, so the client's first event is the first token (over the 32,000 of bench-cuda's,
    # most sampled ids have no text and the first event waited for one that has).
    serving=build-gpu/serve-family
    step write-family 200 "$cli" bench-cuda --dir "$serving" --vocab 1024 --write-only
    for v in "$serving"/variant-*; do cp .device/tokenizer.json "$v/"; done  # what the HTTP server encodes prompts with
    # HTTP against in-process (issue 18), both variants' non-expert sets resident so that they batch.
    step bench-serve 240 "$cli" bench-serve --variants "$serving/variant-0" "$serving/variant-1" --capacity 192 --resident-sets 2 \
      --device cuda --clients 1 4 16 64 --json "$out/bench-serve.json"
    # 96 of a variant's 128 expert positions (16 layers × 8).
    qos_sweep "$serving" 96
    ;;
  mixtral-qos)
    # Issue 59 #8, the rest: two variants of Mixtral-8x7B's layer shapes at 8 layers that differ in
    # half their experts (bench-cuda --shared-experts: 33.8 GB of distinct experts, 36 GB on disk),
    # served under a device budget that holds about 60 % of their experts and a host budget of 32 GB
    # (so a little comes from disk): the QoS sweep one request at a time (the paper's setting) and
    # batched; the recorder's layer_latency_by_hits (a lone token's layers, by hits) is the paper's
    # Table 1 at this size. Then issue 59 #9: the batched consolidated run with a 16 GB host budget.
    # About 450 s after a warm build: a session of its own. The family is deleted after.
    m=build-gpu/mixtral-8l
    step write-mixtral-8l 200 "$cli" bench-cuda --dir "$m" --hidden 4096 --intermediate 14336 --heads 32 --kv-heads 8 --layers 8 --shared-experts --write-only
    for host in 32GiB 16GiB; do
      strategies='{"kind": "consolidated", "budget": "24GiB", "name": "consolidated"}'
      [[ $host == 32GiB ]] && strategies='{"kind": "consolidated", "budget": "24GiB", "max_sequences": 1, "name": "consolidated, one at a time"},
        {"kind": "single", "budget": "24GiB", "max_sequences": 1, "name": "single, one at a time"},
        {"kind": "time-sharing", "budget": "24GiB", "max_sequences": 1, "name": "time-sharing, one at a time"},
        {"kind": "space-sharing", "capacity": 40, "budget": "24GiB", "max_sequences": 1, "name": "space-sharing, one at a time"},
        {"kind": "consolidated", "budget": "24GiB", "name": "consolidated"}, {"kind": "single", "budget": "24GiB", "name": "single"},
        {"kind": "time-sharing", "budget": "24GiB", "name": "time-sharing"}'
      printf '%s\n' "{\"schema\": \"mosaic.sweep/1\", \"description\": \"Issue 59 #8-9: Mixtral-8x7B's layer shapes, 8 layers, two variants sharing half their experts, 24 GiB of device budget, host budget $host\"," \
        "\"variants\": [\"$PWD/$m/variant-0\", \"$PWD/$m/variant-1\"], \"device\": \"cuda\", \"clock\": \"virtual\", \"host_budget\": \"$host\"," \
        "\"rates\": [0.5, 2], \"duration_seconds\": 10, \"prompt\": [20, 20], \"output\": [25, 25], \"strategies\": [$strategies]}" >"$out/mixtral-qos-$host.json"
      step "mixtral-qos-$host" 300 "$cli" bench --config "$out/mixtral-qos-$host.json" --db "$logs/mixtral-qos-$host.sqlite"
      step "mixtral-table1-$host" 30 python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1])
for r in c.execute('SELECT r.strategy, l.hits, l.layer_steps, l.attention_seconds * 1e3, l.expert_seconds * 1e3 FROM layer_latency_by_hits l JOIN runs r ON r.id = l.run_id'): print('%-32s hits %d  steps %6d  attention %.3f ms  experts %.3f ms' % r)" "$logs/mixtral-qos-$host.sqlite"
    done
    rm -rf "$m"
    ;;
  qos)
    # The QoS sweep alone, on a 4-layer family: what a 15-minute session can run after `quick`
    # (the 16-layer family of `serve` takes 2 × 9.5 GB and minutes to write).
    serving=build-gpu/qos-family
    step write-family 150 "$cli" bench-cuda --dir "$serving" --vocab 1024 --layers 4 --write-only
    for v in "$serving"/variant-*; do cp .device/tokenizer.json "$v/"; done
    qos_sweep "$serving" 24  # of a variant's 32 expert positions (4 layers × 8)
    ;;
  *) echo "unknown stage '$stage': use prepare, quick, diagnose, mixtral, mixtral-qos, deepseek, deltas, qos, check, bench, serve or restore" >&2; exit 2 ;;
esac
done
publish
cat "$out/summary.txt"
