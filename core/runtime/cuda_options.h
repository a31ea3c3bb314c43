#pragma once
// How the CUDA backend runs its step. Each switch is on by default (where the GPU allows it); the
// benchmarks and tests turn them off to measure or check what each buys. Plain data, no CUDA: it
// travels in RuntimeConfig on every build.
#include <optional>

namespace mosaic {

struct CudaOptions {
  bool graphs = true;           // decode steps replayed as CUDA graphs (captured once per batch shape)
  bool fused = true;            // the fused small kernels, rather than one launch per operation
  bool tiled_attention = true;  // prefill attention in tiles, rather than token by token
  bool prepared_draws = true;   // rows to draw from turned into candidates on the device
  bool layer_times = true;      // events between layers, for the per-layer times the recorder keeps
  bool l2_prefetch = true;      // the next layer's weights prefetched into L2 while this one runs
  // A step of at most this many (token, k) pairs, every one of them hitting, is routed on the device
  // (no host round trip); more, or a miss, and the host plans it, cuBLAS taking the large groups.
  // At most kernels::kRouteMaxPairs (1024). 64 until measured otherwise (issue 65 #1: bench-cuda's
  // batched decode times 64 against 1024, with and without tensor_core_experts).
  int device_route_pairs = 64;
  // A device-routed step of more than one token computes its groups on tensor cores
  // (kernels::expert_gate_up_tc_cuda: inputs rounded to bf16, as cuBLAS's path reads them) rather
  // than CUDA cores in fp32, where the widths are multiples of 16.
  bool tensor_core_experts = false;
  // Prompt tiles attended on tensor cores (kernels::tiled_attention_tc_cuda: queries and the softmax's
  // weights in bf16) rather than CUDA cores in fp32, where the head size allows (a multiple of 16).
  bool tensor_core_attention = false;
  // Expert slots on virtual memory (pages mapped as experts are pinned): nullopt where the driver and
  // device take it; true insists (a DeviceError naming what is missing); false: plain allocations.
  std::optional<bool> virtual_memory;
  // Programmatic dependent launches: nullopt where the device and kernels allow them; true insists;
  // false: off. Process-wide: the backend made last decides.
  std::optional<bool> programmatic_launches;
};

// `options` with the MOSAIC_CUDA_* environment variables an operator set applied over them ("0" off,
// anything else on): MOSAIC_CUDA_GRAPHS, _FUSED, _TILED_ATTENTION, _DRAWS, _LAYER_TIMES, _L2_PREFETCH,
// _VMM, _PDL, _TENSOR_CORE_EXPERTS, _TENSOR_CORE_ATTENTION; MOSAIC_CUDA_DEVICE_ROUTE_PAIRS a count (one that is not a number
// from 0 to kernels::kRouteMaxPairs is ignored). The one place they are read; `lookup` reads a variable (null: the process's environment;
// tests pass their own, since changing the process's environment races with threads that read it).
using EnvironmentLookup = const char* (*)(const char* name);
CudaOptions with_environment(CudaOptions options, EnvironmentLookup lookup = nullptr);

}  // namespace mosaic
