#pragma once
// LibTorch's own fp32 matmul throughput on this machine: the yardstick the forward pass is
// measured against in the same benchmark run.
#include <cstdint>

namespace mosaic {

struct MatmulRate {
  double gflops = 0;         // 2·m·k·n per call
  double gbytes_per_s = 0;   // the weight matrix (k·n·4 bytes) read per call
  double seconds_per_call = 0;
};

// Times [m, k] × [k, n]ᵀ as at::linear does, repeating until `min_seconds` have passed.
MatmulRate measure_matmul(std::int64_t m, std::int64_t k, std::int64_t n, double min_seconds = 0.5);

}  // namespace mosaic
