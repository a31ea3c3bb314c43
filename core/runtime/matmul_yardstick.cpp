#include "runtime/matmul_yardstick.h"

#include <c10/core/GradMode.h>

#include <ATen/ATen.h>

#include <chrono>

namespace mosaic {

MatmulRate measure_matmul(std::int64_t m, std::int64_t k, std::int64_t n, double min_seconds) {
  c10::NoGradGuard no_grad;
  const at::Tensor x = at::randn({m, k});
  const at::Tensor w = at::randn({n, k});
  at::linear(x, w);  // warm-up: thread pool, page faults
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::int64_t calls = 0;
  double elapsed = 0;
  do {
    at::linear(x, w);
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < min_seconds);
  MatmulRate r;
  r.seconds_per_call = elapsed / static_cast<double>(calls);
  r.gflops = 2.0 * static_cast<double>(m * k * n) / r.seconds_per_call / 1e9;
  r.gbytes_per_s = 4.0 * static_cast<double>(k * n) / r.seconds_per_call / 1e9;
  return r;
}

}  // namespace mosaic
