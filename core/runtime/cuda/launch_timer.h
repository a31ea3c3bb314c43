#pragma once
// Internal: timing one kernel at a time as a decode step runs it. Its launches go into one CUDA graph
// (no launch gaps a graph would not have) and read their weights from an arena many times the L2,
// a copy each, so that every launch reads them from memory. Shared by kernel_timing.cpp and
// delta_timing.cpp; include only from this folder's .cpp files.
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "kernels/bf16.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/event_timing.h"
#include "runtime/cuda/graph_capture.h"
#include "runtime/cuda/kernel_timing.h"

namespace mosaic::cuda::launch_timing {

using kernels::bf16_t;

constexpr int kLaunches = 64;  // the most launches a graph holds (TimingRounds)
// Distinct weight bytes a graph's launches cycle through: many times the L2 (50 MB on the H100).
constexpr std::size_t kMinArena = std::size_t(512) << 20;

// Weights read in turn by a graph's launches: launch i reads copy i.
class Arena {
 public:
  // Small bf16 values throughout, not zeros: nothing for a memory system to compress.
  explicit Arena(std::size_t bytes) : buffer_(bytes) {
    std::vector<bf16_t> pattern(std::size_t(1) << 20);
    for (std::size_t i = 0; i < pattern.size(); ++i)
      pattern[i] = kernels::float_to_bf16(0.01f * static_cast<float>(static_cast<int>(i % 97) - 48) / 48.0f);
    const std::size_t chunk = pattern.size() * sizeof(bf16_t);
    for (std::size_t at = 0; at < bytes; at += chunk)
      MOSAIC_CUDA_CHECK(cudaMemcpy(buffer_.get<std::byte>() + at, pattern.data(), std::min(chunk, bytes - at), cudaMemcpyHostToDevice));
  }
  // Every place a launch reads holds `each` (a packed block, say) instead.
  Arena(std::size_t bytes, std::span<const std::byte> each) : buffer_(bytes) {
    for (std::size_t at = 0, step = spacing(each.size()); at + step <= bytes; at += step)
      MOSAIC_CUDA_CHECK(cudaMemcpy(buffer_.get<std::byte>() + at, each.data(), each.size(), cudaMemcpyHostToDevice));
  }
  // Copies spread over the whole arena, so that even a small weight (a norm, a router) is read from
  // memory and not from the L2 by each launch.
  const std::byte* place(int launch, std::size_t bytes) const {
    const std::size_t copies = std::max<std::size_t>(1, buffer_.bytes() / spacing(bytes));
    return buffer_.get<std::byte>() + (static_cast<std::size_t>(launch) % copies) * spacing(bytes);
  }
  const bf16_t* copy(int launch, std::size_t bytes) const { return reinterpret_cast<const bf16_t*>(place(launch, bytes)); }

 private:
  std::size_t spacing(std::size_t bytes) const { return (std::max(bytes, buffer_.bytes() / kLaunches) + 255) / 256 * 256; }
  DeviceBuffer buffer_;
};

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer d(std::max<std::size_t>(1, host.size()) * sizeof(T));
  if (!host.empty()) MOSAIC_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

inline DeviceBuffer zeros(std::size_t bytes) {
  DeviceBuffer d(std::max<std::size_t>(1, bytes));
  MOSAIC_CUDA_CHECK(cudaMemset(d.get(), 0, d.bytes()));
  return d;
}

// Seconds per launch of enqueue(i) for i < the rounds' launches, captured as one graph and replayed.
class Timer {
 public:
  explicit Timer(TimingRounds rounds)
      : launches_(std::clamp(rounds.launches, 1, kLaunches)), replays_(std::max(1, rounds.replays)) {
    MOSAIC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));  // as the backend's stream
  }
  ~Timer() { cudaStreamDestroy(stream_); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  cudaStream_t stream() const { return stream_; }

  template <class F>
  double per_launch(F&& enqueue) {
    const cudaGraphExec_t exec = capture_graph(stream_, [&] {
      for (int i = 0; i < launches_; ++i) MOSAIC_CUDA_CHECK(enqueue(i));
    });
    try {
      MOSAIC_CUDA_CHECK(cudaGraphLaunch(exec, stream_));  // warm-up
      const double best = best_time(stream_, replays_, [&] { MOSAIC_CUDA_CHECK(cudaGraphLaunch(exec, stream_)); });
      cudaGraphExecDestroy(exec);
      return best / launches_;
    } catch (...) {
      cudaGraphExecDestroy(exec);
      throw;
    }
  }

 private:
  int launches_, replays_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace mosaic::cuda::launch_timing
