// bench-delta: the CPU delta kernel (x · Δ̂ᵀ straight from the packed arrays) against LibTorch's
// dense fp32 matmul of the same shape, measured in the same run. Decode is memory-bound: the delta
// reads 0.3–0.6 bytes per weight where the fp32 expert slot reads 4, so its floor is that much lower;
// the table says how far each side is from moving its bytes at the dense matmul's measured GB/s.
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <random>

#include "cli/commands.h"
#include "runtime/delta_view.h"
#include "model/delta_codec.h"
#include "runtime/matmul_yardstick.h"
#include "runtime/threads.h"

namespace mosaic::cli {
namespace {

double seconds_per_call(const std::function<void()>& call, double min_seconds = 0.5) {
  call();  // first touches outside the timing
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    call();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return elapsed / calls;
}

}  // namespace

void add_bench_delta_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-delta", "CPU delta GEMV/GEMM from packed deltas against LibTorch's dense fp32 matmul of the same shape, same run");
  struct Opts { int threads = 1; };
  auto o = std::make_shared<Opts>();
  add_threads_option(cmd, o->threads, "CPU threads for the dense matmul (the delta kernel runs on one)");
  cmd->callback([o] {
    configure_threads(o->threads);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::printf("%-12s %2s  %-12s %11s %11s %7s %12s %12s\n", "rows × cols", "n", "delta", "dense ms", "delta ms", "ratio", "dense GB/s", "delta GB/s");
    // A qwen2_moe expert's gate/up projection, and Mixtral's down projection.
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1408, 2048}, std::pair<std::int64_t, std::int64_t>{4096, 14336}}) {
      std::vector<float> delta(static_cast<std::size_t>(rows * cols));
      for (float& v : delta) v = normal(rng);
      for (const DeltaFormat f : {DeltaFormat{4, true, 128}, DeltaFormat{4, false, 128}, DeltaFormat{2, true, 128}}) {
        const PackedDelta p = compress_delta(delta, rows, cols, f);
        const kernels::DeltaView view = delta_view(p, f);
        const double packed = static_cast<double>(packed_bytes(f, rows, cols));
        for (int n : {1, 4}) {
          std::vector<float> x(static_cast<std::size_t>(n * cols), 0.5f), y(static_cast<std::size_t>(n * rows));
          const double delta_s = seconds_per_call([&] { kernels::delta_linear_cpu(x.data(), n, view, false, y.data()); });
          const MatmulRate dense = measure_matmul(n, cols, rows);
          char name[32];
          std::snprintf(name, sizeof name, "%d-bit %s", f.bits, f.sparse24 ? "2:4" : "dense");
          std::printf("%5lld × %-5lld %2d  %-12s %11.3f %11.3f %6.2f× %12.2f %12.2f\n", static_cast<long long>(rows), static_cast<long long>(cols), n, name,
                      dense.seconds_per_call * 1e3, delta_s * 1e3, dense.seconds_per_call / delta_s, dense.gbytes_per_s, packed / delta_s / 1e9);
        }
      }
    }
    std::cout << "ratio: dense time ÷ delta time (above 1: the delta is faster). GB/s: the weights' bytes read per second "
                 "(fp32 for dense, the packed arrays for the delta).\n";
  });
}

}  // namespace mosaic::cli
