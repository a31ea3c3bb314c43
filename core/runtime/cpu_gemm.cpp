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

// MB rows of x (split: each 16 elements as even then odd, see split16) against R rows of w: two
// accumulators each, K in steps of 16, then the tail one element at a time. Every (row of x, row of w)
// is summed the same way whatever MB and R are, so a product depends neither on the batch it is in
// nor on how the rows were split over threads.
template <int MB, int R, class W>
__attribute__((always_inline)) inline void block(const float* x, const float* xs, std::int64_t K, const W* w, float* y, std::int64_t N) {
  // The rows stream from memory: ask for them 2 KiB ahead (measured against 0.5, 1 and 4 KiB with
  // the kernel alone: 0.5 KiB left bf16 rows at 60 % of one core's read rate, 2 KiB at 85 %).
  constexpr int kAhead = 2048 / sizeof(W);
  const std::int64_t K16 = K & ~std::int64_t(15);
  v8 even[MB][R], odd[MB][R];
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) even[i][r] = odd[i][r] = v8{};
  for (std::int64_t k = 0; k < K16; k += 16) {
    for (int r = 0; r < R; ++r) {
      const W* row = w + r * K + k;
      __builtin_prefetch(row + kAhead);  // each step: every other one repeats a line for bf16, at no measured cost
      const Split b = split16(row);
      for (int i = 0; i < MB; ++i) {
        even[i][r] += load8(xs + i * K16 + k) * b.even;
        odd[i][r] += load8(xs + i * K16 + k + 8) * b.odd;
      }
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) {
      float s = 0;
      for (int j = 0; j < 8; ++j) s += even[i][r][j];
      for (int j = 0; j < 8; ++j) s += odd[i][r][j];
      for (std::int64_t k = K16; k < K; ++k) s += x[i * K + k] * widen(w[r * K + k]);
      y[i * N + r] = s;
    }
}

// Rows [n, n + R) of w against every row of x, MB of x's at a time: w's rows are read from memory
// once, then from cache for each group of x's rows.
template <int MB, int R, class W>
__attribute__((always_inline)) inline void against_x(const float* x, const float* xs, std::int64_t M, std::int64_t K, const W* w, float* y,
                                                     std::int64_t N) {
  const std::int64_t K16 = K & ~std::int64_t(15);
  std::int64_t m = 0;
  for (; m + MB <= M; m += MB) block<MB, R>(x + m * K, xs + m * K16, K, w, y + m * N, N);
  if constexpr (MB > 1) {
    switch (M - m) {
      case 3: block<3, R>(x + m * K, xs + m * K16, K, w, y + m * N, N); break;
      case 2: block<2, R>(x + m * K, xs + m * K16, K, w, y + m * N, N); break;
      case 1: block<1, R>(x + m * K, xs + m * K16, K, w, y + m * N, N); break;
      default: break;
    }
  }
}

// Rows [n0, n1) of w, R at a time, the last few one at a time. (Helpers, not lambdas: a lambda is a
// function of its own, compiled for the baseline target, not for the AVX2 clone that calls it.)
template <int MB, int R, class W>
__attribute__((always_inline)) inline void rows_by(const float* x, const float* xs, std::int64_t M, std::int64_t K, const W* w, std::int64_t n0,
                                                   std::int64_t n1, float* y, std::int64_t N) {
  std::int64_t n = n0;
  for (; n + R <= n1; n += R) against_x<MB, R>(x, xs, M, K, w + n * K, y + n, N);
  for (; n < n1; ++n) against_x<MB, 1>(x, xs, M, K, w + n * K, y + n, N);
}

// Sixteen accumulators at most (the AVX2 clone's registers), with the FMA chains independent enough
// to hide their latency: one row of x against four rows of w (eight chains), two against two, and
// from three rows of x on, four of them against one row of w at a time.
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
  if (M == 1) return rows_by<1, 4>(x, xs, M, K, w, n0, n1, y, N);
  if (M == 2) return rows_by<2, 2>(x, xs, M, K, w, n0, n1, y, N);
  rows_by<4, 1>(x, xs, M, K, w, n0, n1, y, N);
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
