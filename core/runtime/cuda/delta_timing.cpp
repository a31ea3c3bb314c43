// A delta kernel against the dense GEMV it replaces, one matrix at a time (kernel_timing.h): issue
// 61 #5 asks a delta expert's decode time to be at most 0.6 × the dense bf16 expert's.
#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "kernels/delta_linear.h"
#include "kernels/linear.h"
#include "model/delta_codec.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/cuda/kernel_timing.h"
#include "runtime/cuda/launch_timer.h"

namespace mosaic::cuda {
namespace {

using namespace launch_timing;

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// A random delta's packed arrays in `f`, one block: codes and zeros anywhere in their range, 2:4
// places valid (two distinct, increasing, in each four: the kernels' shared-memory reads fall as a
// real pack's do), scales about 0.01. Each array starts 256-byte aligned, as in a slot's delta room.
struct Block {
  std::vector<std::byte> bytes;
  std::size_t qweight = 0, meta = 0, scales = 0, zeros = 0;
  std::size_t packed = 0;  // the arrays' own bytes, gaps left out
};

Block random_block(const DeltaFormat& f, std::int64_t rows, std::int64_t cols) {
  std::mt19937 rng(61);
  std::uniform_int_distribution<std::uint32_t> word;
  const auto n = [rows](std::int64_t per_row) { return static_cast<std::size_t>(rows * per_row); };
  const std::size_t values = n(value_words(f, cols)), metas = f.sparse24 ? n(meta_words(f, cols)) : 0, groups = n(group_count(f, cols));
  Block b;
  b.meta = aligned(values * 4);
  b.scales = b.meta + aligned(metas * 4);
  b.zeros = b.scales + aligned(groups * 2);
  b.bytes.resize(b.zeros + aligned(groups));
  b.packed = packed_bytes(f, rows, cols);
  auto* q = reinterpret_cast<std::uint32_t*>(b.bytes.data());
  for (std::size_t i = 0; i < values; ++i) q[i] = word(rng);
  // A four's two places as 4 bits (first in the low 2): the six pairs of distinct increasing places.
  static constexpr std::uint32_t kPairs[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};
  auto* m = reinterpret_cast<std::uint32_t*>(b.bytes.data() + b.meta);
  for (std::size_t i = 0; i < metas; ++i) {
    std::uint32_t w = 0;
    for (int four = 0; four < 8; ++four) w |= kPairs[word(rng) % 6] << (4 * four);
    m[i] = w;
  }
  auto* s = reinterpret_cast<std::uint16_t*>(b.bytes.data() + b.scales);
  for (std::size_t i = 0; i < groups; ++i) s[i] = static_cast<std::uint16_t>(0x2000 + word(rng) % 0x200);  // f16 0.0078 … 0.0117
  auto* z = reinterpret_cast<std::uint8_t*>(b.bytes.data() + b.zeros);
  for (std::size_t i = 0; i < groups; ++i) z[i] = static_cast<std::uint8_t>(word(rng) & ((1u << f.bits) - 1));
  return b;
}

}  // namespace

std::vector<DeltaKernelTime> time_delta_kernels(std::int64_t rows, std::int64_t cols, std::span<const int> tokens, TimingRounds rounds) {
  if (const auto why = unavailable()) throw DeviceError("device cuda", "", *why);
  constexpr std::int64_t kMostSide = std::int64_t(1) << 20;
  if (rows < 1 || cols < 4 || cols % 4 != 0 || rows > kMostSide || cols > kMostSide)
    throw InvalidArgument("delta kernel timing", "rows / cols", "are " + std::to_string(rows) + " × " + std::to_string(cols),
                          "give a matrix of 1 … 2^20 rows and 4 … 2^20 columns, the columns a multiple of 4 (2:4 sparsity)");
  for (const int n : tokens)
    if (n < 1 || n > 8)
      throw InvalidArgument("delta kernel timing", "tokens", "includes " + std::to_string(n), "give 1 … 8 rows of x: the dense GEMV's decode sizes");

  Timer timer(rounds);
  const cudaStream_t st = timer.stream();
  const std::size_t dense_bytes = static_cast<std::size_t>(rows * cols) * sizeof(bf16_t);
  const Arena dense(std::max(kMinArena, 2 * dense_bytes));
  DeviceBuffer x = zeros(8 * static_cast<std::size_t>(cols) * sizeof(float)), y = zeros(8 * static_cast<std::size_t>(rows) * sizeof(float));
  MOSAIC_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before the timer's stream (non-blocking) reads them
  const int in = static_cast<int>(cols), out = static_cast<int>(rows);

  std::vector<DeltaKernelTime> times;
  for (const DeltaFormat f : {DeltaFormat{4, true, 128}, DeltaFormat{4, false, 128}, DeltaFormat{2, true, 128}}) {
    // Copies of the block spread over an arena many times the L2, as the dense ones are.
    const Block block = random_block(f, rows, cols);
    const Arena arena(std::max(kMinArena, 2 * block.bytes.size()), block.bytes);
    MOSAIC_CUDA_CHECK(cudaDeviceSynchronize());  // a copy from pageable memory may land after it returns; the timer's stream does not wait
    std::vector<kernels::DeltaView> views;
    for (int i = 0; i < kLaunches; ++i) {
      const std::byte* at = arena.place(i, block.bytes.size());
      views.push_back({.qweight = reinterpret_cast<const std::uint32_t*>(at),
                       .meta = f.sparse24 ? reinterpret_cast<const std::uint32_t*>(at + block.meta) : nullptr,
                       .scales = reinterpret_cast<const std::uint16_t*>(at + block.scales),
                       .zeros = reinterpret_cast<const std::uint8_t*>(at + block.zeros),
                       .rows = rows, .cols = cols, .group = f.group, .bits = f.bits, .sparse24 = f.sparse24});
    }
    const bool tiles = kernels::delta_tiles_fit(views.front());
    for (const int n : tokens) {
      auto delta = [&](kernels::DeltaKernel kernel) {
        return timer.per_launch([&](int i) {
          return kernels::delta_linear_cuda(x.get<float>(), n, views[static_cast<std::size_t>(i)], false, y.get<float>(), rows, st, kernel);
        });
      };
      DeltaKernelTime t{.bits = f.bits, .sparse24 = f.sparse24, .tokens = n};
      t.dense = timer.per_launch([&](int i) { return kernels::linear_cuda(x.get<float>(), n, in, dense.copy(i, dense_bytes), out, nullptr, false, y.get<float>(), st); });
      t.rows = delta(kernels::DeltaKernel::rows);
      t.tiles = tiles ? delta(kernels::DeltaKernel::tiles) : 0.0;
      t.dense_bytes = static_cast<double>(dense_bytes);
      t.delta_bytes = static_cast<double>(block.packed);
      times.push_back(t);
    }
  }
  return times;
}

}  // namespace mosaic::cuda
