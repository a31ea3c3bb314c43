#pragma once
// One delta expert's packed Δ (gate, up and down: docs/delta-format.md) as a single block of bytes,
// so that the CUDA backend loads it with one copy into a slot's delta room and its kernels read it
// there. Each array starts 256-byte aligned. Plain C++, tested without a GPU.
#include <array>
#include <cstddef>

#include "kernels/delta_linear.h"
#include "runtime/host_store.h"

namespace mosaic::cuda {

struct DeltaBlock {
  struct Matrix {
    std::size_t qweight = 0, meta = 0, scales = 0, zeros = 0;  // byte offsets in the block
  };
  std::array<Matrix, 3> part;  // gate, up, down
  std::size_t bytes = 0;       // the whole block, a multiple of 256
};

DeltaBlock delta_block(const HostDelta& d);
// Writes `d`'s arrays at `to` (b.bytes of room) where `b` places them.
void write_delta_block(const HostDelta& d, const DeltaBlock& b, std::byte* to);
// Views of gate, up and down over a block written at `at` (host or device memory alike).
std::array<kernels::DeltaView, 3> delta_block_views(const HostDelta& d, const DeltaBlock& b, const std::byte* at);

}  // namespace mosaic::cuda
