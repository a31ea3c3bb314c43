#include "runtime/cpu_gemm.h"

#include <cstring>

#include "common/simd_clones.h"
#include "runtime/cpu_vectors.h"

namespace mosaic {
namespace {

using cpu_vectors::v8;
using cpu_vectors::load8;

// Vectors pass between always-inline helpers only: no ABI to keep. Not popped: GCC reports -Wpsabi
// when it emits code, at the end of the (unity) translation unit, where a pop would be in force.
#pragma GCC diagnostic ignored "-Wpsabi"

typedef std::uint16_t u16x8 __attribute__((vector_size(16)));
typedef std::uint16_t u16x16 __attribute__((vector_size(32)));

// Eight bf16 widened to fp32: the 16 bits become the float's high half (exact).
__attribute__((always_inline)) inline v8 load8(const std::uint16_t* p) {
  u16x8 h;
  __builtin_memcpy(&h, p, 16);
  // Each bf16 beside a zero below it: (h << 16) as 32-bit lanes, one unpack and no shift.
  const u16x16 wide = __builtin_shufflevector(u16x8{}, h, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  v8 v;
  __builtin_memcpy(&v, &wide, 32);
  return v;
}

__attribute__((always_inline)) inline float widen(float f) { return f; }
__attribute__((always_inline)) inline float widen(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// MB rows of x against two rows of w: 2·MB accumulators of 8 lanes, K in steps of 8, then the tail.
template <int MB, class W>
__attribute__((always_inline)) inline void block(const float* x, std::int64_t K, const W* w0, const W* w1, float* y, std::int64_t N) {
  constexpr int kAhead = 512 / sizeof(W);  // the rows stream from memory: ask for them 512 bytes ahead
  const std::int64_t K8 = K & ~std::int64_t(7);
  v8 a0[MB], a1[MB];
  for (int i = 0; i < MB; ++i) a0[i] = a1[i] = v8{};
  constexpr std::int64_t kLine = 64 / sizeof(W);  // elements a cache line holds: one prefetch each
  for (std::int64_t k = 0; k < K8; k += 8) {
    if (k % kLine == 0) {
      __builtin_prefetch(w0 + k + kAhead);
      __builtin_prefetch(w1 + k + kAhead);
    }
    const v8 b0 = load8(w0 + k), b1 = load8(w1 + k);
    for (int i = 0; i < MB; ++i) {
      const v8 xv = load8(x + i * K + k);
      a0[i] += xv * b0;
      a1[i] += xv * b1;
    }
  }
  for (int i = 0; i < MB; ++i) {
    float s0 = 0, s1 = 0;
    for (int j = 0; j < 8; ++j) {
      s0 += a0[i][j];
      s1 += a1[i][j];
    }
    for (std::int64_t k = K8; k < K; ++k) {
      s0 += x[i * K + k] * widen(w0[k]);
      s1 += x[i * K + k] * widen(w1[k]);
    }
    y[i * N] = s0;
    y[i * N + 1] = s1;
  }
}

template <class W>
__attribute__((always_inline)) inline void rows(const float* x, std::int64_t M, std::int64_t K, const W* w, std::int64_t n0, std::int64_t n1,
                                                float* y, std::int64_t N) {
  std::int64_t n = n0;
  for (; n + 2 <= n1; n += 2) {
    const W* w0 = w + n * K;
    std::int64_t m = 0;
    for (; m + 4 <= M; m += 4) block<4>(x + m * K, K, w0, w0 + K, y + m * N + n, N);
    switch (M - m) {
      case 3: block<3>(x + m * K, K, w0, w0 + K, y + m * N + n, N); break;
      case 2: block<2>(x + m * K, K, w0, w0 + K, y + m * N + n, N); break;
      case 1: block<1>(x + m * K, K, w0, w0 + K, y + m * N + n, N); break;
      default: break;
    }
  }
  for (; n < n1; ++n)  // an odd last row
    for (std::int64_t m = 0; m < M; ++m) {
      float s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += x[m * K + k] * widen(w[n * K + k]);
      y[m * N + n] = s;
    }
}

}  // namespace

// The loops are vectors already (the K loop) or must stay scalar: the auto-vectorizer would pair the
// two rows' tails into one vector and contract them into FMAs differently for the two weight types,
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
