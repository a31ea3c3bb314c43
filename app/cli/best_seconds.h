#pragma once
// The benchmarks' timing: the fastest of several runs, since the machine's noise only ever slows a
// run down.
#include <algorithm>
#include <chrono>

namespace mosaic::cli {

// Seconds of the fastest of `reps` calls of `f`.
template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace mosaic::cli
