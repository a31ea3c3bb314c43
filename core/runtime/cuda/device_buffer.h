#pragma once
// Owned device memory (cudaMalloc), and owned pinned host memory (cudaHostAlloc), moved not copied.
#include <cstddef>
#include <utility>

#include "runtime/cuda/cuda_check.h"

namespace mosaic::cuda {

template <bool Host>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes) { resize(bytes); }
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~Buffer() { release(); }

  // Drops the contents; no-op when the size is already enough.
  void reserve(std::size_t bytes) {
    if (bytes > bytes_) resize(bytes);
  }
  void resize(std::size_t bytes) {
    release();
    if (bytes == 0) return;
    if constexpr (Host) MOSAIC_CUDA_CHECK(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault));
    else MOSAIC_CUDA_CHECK(cudaMalloc(&p_, bytes));
    bytes_ = bytes;
  }
  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (!p_) return;
    if constexpr (Host) cudaFreeHost(p_);
    else cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

using DeviceBuffer = Buffer<false>;
using PinnedBuffer = Buffer<true>;

}  // namespace mosaic::cuda
