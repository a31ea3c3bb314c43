#include "runtime/cpu_gemm.h"

#include <vector>

#include "common/simd_clones.h"
#include "runtime/cpu_vectors.h"

namespace mosaic {
namespace {

using cpu_vectors::v8;
using cpu_vectors::load8;
using cpu_vectors::store8;

// Vectors pass between always-inline helpers only: no ABI to keep. Not popped: GCC reports -Wpsabi
// when it emits code, at the end of the (unity) translation unit, where a pop would be in force.
#pragma GCC diagnostic ignored "-Wpsabi"

typedef std::uint32_t u32x8 __attribute__((vector_size(32)));

// The kernels multiply sixteen elements of K at a time as two vectors, one of the even elements and
// one of the odd, in the lane order that splitting sixteen bf16 costs least: a 32-byte load holds
// them in pairs, one vpermq puts the pairs in that order, a shift left by 16 widens the even
// elements and a mask the odd ones (exact). fp32 weights are split the same way (two vshufps), and x
// once per call, so both weight types sum the same products in the same lanes in the same order.
struct Split {
  v8 even, odd;
};

__attribute__((always_inline)) inline Split split16(const float* p) {
  const v8 a = load8(p), b = load8(p + 8);
  return {__builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14), __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15)};
}

__attribute__((always_inline)) inline Split split16(const std::uint16_t* p) {
  u32x8 pairs;
  __builtin_memcpy(&pairs, p, 32);
  pairs = __builtin_shufflevector(pairs, pairs, 0, 1, 4, 5, 2, 3, 6, 7);
  const u32x8 even = pairs << 16, odd = pairs & 0xffff0000u;
  Split s;
  __builtin_memcpy(&s.even, &even, 32);
  __builtin_memcpy(&s.odd, &odd, 32);
  return s;
}

__attribute__((always_inline)) inline float widen(float f) { return f; }
__attribute__((always_inline)) inline float widen(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// MB rows of x (split: each 16 elements as even then odd, see split16) against one row of w: two
// accumulators each, K in steps of 16, then the tail one element at a time. Every (row of x, row of w)
// is summed the same way whatever MB is, so a product depends neither on the batch it is in nor on
// how the rows were split over threads.
template <int MB, class W>
__attribute__((always_inline)) inline void block(const float* x, const float* xs, std::int64_t K, const W* w, float* y, std::int64_t N) {
  // The row streams from memory: ask for it 2 KiB ahead (the kernel alone, against 0.5, 1 and 4 KiB:
  // 0.5 left a core well short of its read rate, 4 lost 15-20 %, 1 and 2 were level).
  constexpr int kAhead = 2048 / sizeof(W);
  const std::int64_t K16 = K & ~std::int64_t(15);
  v8 even[MB], odd[MB];
  for (int i = 0; i < MB; ++i) even[i] = odd[i] = v8{};
  for (std::int64_t k = 0; k < K16; k += 16) {
    __builtin_prefetch(w + k + kAhead);  // each step: every other one repeats a line for bf16, at no measured cost
    const Split b = split16(w + k);
    for (int i = 0; i < MB; ++i) {
      even[i] += load8(xs + i * K16 + k) * b.even;
      odd[i] += load8(xs + i * K16 + k + 8) * b.odd;
    }
  }
  for (int i = 0; i < MB; ++i) {
    float s = 0;
    for (int j = 0; j < 8; ++j) s += even[i][j];
    for (int j = 0; j < 8; ++j) s += odd[i][j];
    for (std::int64_t k = K16; k < K; ++k) s += x[i * K + k] * widen(w[k]);
    y[i * N] = s;
  }
}

// Rows [n0, n1) of w, one at a time, each against every row of x four at a time: a row of w is read
// from memory once, then from cache for each group of x's rows. One row of w at a time, not several:
// a thread then reads one sequential stream, which the hardware prefetcher follows at the full read
// rate; four rows at once (four streams a row's length apart) read bf16 at 60 % of it at batch 1
// and 2 (kernel alone, 2 threads, 2026-11-29; docs/benchmarks.md). The two FMA chains of batch 1
// still outrun memory. (Helpers, not lambdas: a lambda is a function of its own, compiled for the
// baseline target, not for the AVX2 clone that calls it.)
template <class W>
__attribute__((always_inline)) inline void rows(const float* x, std::int64_t M, std::int64_t K, const W* w, std::int64_t n0, std::int64_t n1,
                                                float* y, std::int64_t N) {
  // x split once per call (a thread's, over its rows of w): M·K floats against (n1 − n0)·K weights.
  const std::int64_t K16 = K & ~std::int64_t(15);
  thread_local std::vector<float> split;
  if (split.size() < static_cast<std::size_t>(M * K16)) split.resize(static_cast<std::size_t>(M * K16));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t k = 0; k < K16; k += 16) {  // x split as fp32 weights are
      const Split halves = split16(x + m * K + k);
      store8(split.data() + m * K16 + k, halves.even);
      store8(split.data() + m * K16 + k + 8, halves.odd);
    }
  const float* xs = split.data();
  for (std::int64_t n = n0; n < n1; ++n) {
    const W* row = w + n * K;
    std::int64_t m = 0;
    for (; m + 4 <= M; m += 4) block<4>(x + m * K, xs + m * K16, K, row, y + m * N + n, N);
    switch (M - m) {
      case 3: block<3>(x + m * K, xs + m * K16, K, row, y + m * N + n, N); break;
      case 2: block<2>(x + m * K, xs + m * K16, K, row, y + m * N + n, N); break;
      case 1: block<1>(x + m * K, xs + m * K16, K, row, y + m * N + n, N); break;
      default: break;
    }
  }
}

}  // namespace

// The loops are vectors already (the K loop) or must stay scalar: the auto-vectorizer would pair
// rows' tails into one vector and contract them into FMAs differently for the two weight types,
// and bf16 weights would then no longer give fp32's results bit for bit.
#define MOSAIC_SKINNY __attribute__((optimize("no-tree-vectorize")))

MOSAIC_SIMD_CLONES MOSAIC_SKINNY
void skinny_gemm(const float* x, std::int64_t M, std::int64_t K, const float* w, std::int64_t n0, std::int64_t n1, float* y,
                 std::int64_t N) {
  rows(x, M, K, w, n0, n1, y, N);
}

MOSAIC_SIMD_CLONES MOSAIC_SKINNY
void skinny_gemm_bf16(const float* x, std::int64_t M, std::int64_t K, const std::uint16_t* w, std::int64_t n0, std::int64_t n1, float* y,
                      std::int64_t N) {
  rows(x, M, K, w, n0, n1, y, N);
}

}  // namespace mosaic
