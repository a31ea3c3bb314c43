#include "cli/read_rate.h"

#include <ATen/Parallel.h>

#include <cstdint>
#include <vector>

#include "cli/best_seconds.h"

namespace mosaic::cli {

double read_gbs(std::size_t bytes) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> data(n, 1.0f);
  volatile float sink = 0;
  const double seconds = best_seconds(5, [&] {
    std::vector<float> parts(static_cast<std::size_t>(at::get_num_threads()) * 16, 0.0f);
    at::parallel_for(0, static_cast<std::int64_t>(n), std::int64_t{1} << 20, [&](std::int64_t b, std::int64_t e) {
      typedef float v8 __attribute__((vector_size(32)));
      v8 a0{}, a1{}, a2{}, a3{};
      std::int64_t i = b;
      for (; i + 32 <= e; i += 32) {
        v8 x0, x1, x2, x3;
        __builtin_memcpy(&x0, &data[static_cast<std::size_t>(i)], 32);
        __builtin_memcpy(&x1, &data[static_cast<std::size_t>(i) + 8], 32);
        __builtin_memcpy(&x2, &data[static_cast<std::size_t>(i) + 16], 32);
        __builtin_memcpy(&x3, &data[static_cast<std::size_t>(i) + 24], 32);
        a0 += x0;
        a1 += x1;
        a2 += x2;
        a3 += x3;
      }
      float s = 0;
      for (int j = 0; j < 8; ++j) s += a0[j] + a1[j] + a2[j] + a3[j];
      for (; i < e; ++i) s += data[static_cast<std::size_t>(i)];
      parts[static_cast<std::size_t>(at::get_thread_num()) * 16] += s;
    });
    float s = 0;
    for (float p : parts) s += p;
    sink = s;
  });
  (void)sink;
  return static_cast<double>(n * sizeof(float)) / seconds / 1e9;
}

}  // namespace mosaic::cli
