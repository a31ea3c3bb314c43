#include "cli/read_rate.h"

#include <ATen/Parallel.h>

#include <cstdint>
#include <vector>

#include "cli/best_seconds.h"
#include "common/simd_clones.h"

namespace mosaic::cli {
namespace {

// The sum of n floats, four vectors at a time: the AVX2 clone, one 32-byte load per vector; the
// baseline build's two 16-byte halves read 20 % slower than this CPU's memory on two threads
// (17.8 against 22.2 GB/s, 2026-11-29), which made every floor measured against it too low.
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors stay inside this function: no ABI to keep
MOSAIC_SIMD_CLONES float sum_of(const float* data, std::int64_t n) {
  typedef float v8 __attribute__((vector_size(32)));
  v8 a0{}, a1{}, a2{}, a3{};
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    v8 x0, x1, x2, x3;
    __builtin_memcpy(&x0, data + i, 32);
    __builtin_memcpy(&x1, data + i + 8, 32);
    __builtin_memcpy(&x2, data + i + 16, 32);
    __builtin_memcpy(&x3, data + i + 24, 32);
    a0 += x0;
    a1 += x1;
    a2 += x2;
    a3 += x3;
  }
  float s = 0;
  for (int j = 0; j < 8; ++j) s += a0[j] + a1[j] + a2[j] + a3[j];
  for (; i < n; ++i) s += data[i];
  return s;
}

}  // namespace

double read_gbs(std::size_t bytes) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> data(n, 1.0f);
  volatile float sink = 0;
  const double seconds = best_seconds(5, [&] {
    std::vector<float> parts(static_cast<std::size_t>(at::get_num_threads()) * 16, 0.0f);
    at::parallel_for(0, static_cast<std::int64_t>(n), std::int64_t{1} << 20, [&](std::int64_t b, std::int64_t e) {
      parts[static_cast<std::size_t>(at::get_thread_num()) * 16] += sum_of(data.data() + b, e - b);
    });
    float s = 0;
    for (float p : parts) s += p;
    sink = s;
  });
  (void)sink;
  return static_cast<double>(n * sizeof(float)) / seconds / 1e9;
}

}  // namespace mosaic::cli
