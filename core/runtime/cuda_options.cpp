#include "runtime/cuda_options.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "kernels/moe_experts.h"

namespace mosaic {

CudaOptions with_environment(CudaOptions o, EnvironmentLookup lookup) {
  auto read = [&](const char* name) { return lookup ? lookup(name) : std::getenv(name); };
  auto set = [&](const char* name, auto& field) {
    if (const char* v = read(name)) field = std::string_view(v) != "0";
  };
  set("MOSAIC_CUDA_GRAPHS", o.graphs);
  set("MOSAIC_CUDA_FUSED", o.fused);
  set("MOSAIC_CUDA_TILED_ATTENTION", o.tiled_attention);
  set("MOSAIC_CUDA_DRAWS", o.prepared_draws);
  set("MOSAIC_CUDA_LAYER_TIMES", o.layer_times);
  set("MOSAIC_CUDA_L2_PREFETCH", o.l2_prefetch);
  set("MOSAIC_CUDA_VMM", o.virtual_memory);
  set("MOSAIC_CUDA_PDL", o.programmatic_launches);
  set("MOSAIC_CUDA_TENSOR_CORE_EXPERTS", o.tensor_core_experts);
  set("MOSAIC_CUDA_TENSOR_CORE_ATTENTION", o.tensor_core_attention);
  if (const char* v = read("MOSAIC_CUDA_DEVICE_ROUTE_PAIRS")) {
    int pairs = 0;
    const std::string_view text(v);
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pairs);
    if (error == std::errc() && end == text.data() + text.size() && pairs >= 0 && pairs <= kernels::kRouteMaxPairs) o.device_route_pairs = pairs;
  }
  return o;
}

}  // namespace mosaic
