#pragma once
// Bytes a kernel asks the L2 to fetch for a kernel after it, so that they move while the memory would
// otherwise idle: a launch's one-block tail, a launch boundary, a latency-bound kernel. A hint, with
// no effect on results: the bulk prefetch of sm_90 (issued by the kernel's threads, nothing held or
// waited for); nothing on older GPUs or on simt. Up to kRanges ranges, each rounded inward to whole
// 16-byte pieces, as the instruction needs.
#include <cstddef>
#include <cstdint>

namespace mosaic::kernels {

struct L2Prefetch {
  static constexpr int kRanges = 3;
  const void* p[kRanges] = {};
  std::size_t bytes[kRanges] = {};

  // Adds [at, at + n); a null or empty range, or one past kRanges, is left out.
  L2Prefetch& add(const void* at, std::size_t n) {
    const auto begin = (reinterpret_cast<std::uintptr_t>(at) + 15) / 16 * 16;
    const auto end = (reinterpret_cast<std::uintptr_t>(at) + n) / 16 * 16;
    for (int i = 0; i < kRanges && at && end > begin; ++i)
      if (!p[i]) {
        p[i] = reinterpret_cast<const void*>(begin);
        bytes[i] = end - begin;
        break;
      }
    return *this;
  }
  // At most `most` bytes in all (whole 16-byte pieces), the first ranges' first bytes kept: what is
  // asked for ahead of its reader must still be in the L2 when the reader comes.
  L2Prefetch& limit(std::size_t most) {
    for (int i = 0; i < kRanges; ++i) {
      bytes[i] = bytes[i] < most ? bytes[i] : most / 16 * 16;
      most -= bytes[i];
      if (!bytes[i]) p[i] = nullptr;
    }
    return *this;
  }
};

}  // namespace mosaic::kernels
