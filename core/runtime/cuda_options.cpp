#include "runtime/cuda_options.h"

#include <cstdlib>
#include <string_view>

namespace mosaic {

CudaOptions with_environment(CudaOptions o, EnvironmentLookup lookup) {
  auto set = [&](const char* name, auto& field) {
    if (const char* v = lookup ? lookup(name) : std::getenv(name)) field = std::string_view(v) != "0";
  };
  set("MOSAIC_CUDA_GRAPHS", o.graphs);
  set("MOSAIC_CUDA_FUSED", o.fused);
  set("MOSAIC_CUDA_TILED_ATTENTION", o.tiled_attention);
  set("MOSAIC_CUDA_DRAWS", o.prepared_draws);
  set("MOSAIC_CUDA_LAYER_TIMES", o.layer_times);
  set("MOSAIC_CUDA_L2_PREFETCH", o.l2_prefetch);
  set("MOSAIC_CUDA_VMM", o.virtual_memory);
  set("MOSAIC_CUDA_PDL", o.programmatic_launches);
  return o;
}

}  // namespace mosaic
