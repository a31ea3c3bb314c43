#pragma once
// Best-of-several timing of work on a stream between two events: what the rate probes and the kernel
// timer share.
#include <algorithm>
#include <limits>

#include "runtime/cuda/cuda_check.h"

namespace mosaic::cuda {

// Seconds of the fastest of `rounds` runs of `enqueue()` on `stream`.
template <class F>
double best_time(cudaStream_t stream, int rounds, F&& enqueue) {
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      if (start) cudaEventDestroy(start);
      if (stop) cudaEventDestroy(stop);
    }
  } e;
  MOSAIC_CUDA_CHECK(cudaEventCreate(&e.start));
  MOSAIC_CUDA_CHECK(cudaEventCreate(&e.stop));
  float best = std::numeric_limits<float>::max();
  for (int r = 0; r < rounds; ++r) {
    MOSAIC_CUDA_CHECK(cudaEventRecord(e.start, stream));
    enqueue();
    MOSAIC_CUDA_CHECK(cudaEventRecord(e.stop, stream));
    MOSAIC_CUDA_CHECK(cudaEventSynchronize(e.stop));
    float ms = 0;
    MOSAIC_CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
    best = std::min(best, ms);
  }
  return double(best) / 1e3;
}

}  // namespace mosaic::cuda
