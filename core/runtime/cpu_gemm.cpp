#include "runtime/cpu_gemm.h"

#include "common/simd_clones.h"

namespace mosaic {
namespace {

// Eight floats, as GCC and Clang vectorize them (AVX in the x86-64-v3 clone, SSE pairs otherwise).
typedef float v8 __attribute__((vector_size(32)));

#define MOSAIC_LOAD8(p)             \
  ({                                \
    v8 v_;                          \
    __builtin_memcpy(&v_, (p), 32); \
    v_;                             \
  })

// MB rows of x against two rows of w: 2·MB accumulators of 8 lanes, K in steps of 8, then the tail.
template <int MB>
__attribute__((always_inline)) inline void block(const float* x, std::int64_t K, const float* w0, const float* w1, float* y,
                                                 std::int64_t N) {
  const std::int64_t K8 = K & ~std::int64_t(7);
  v8 a0[MB], a1[MB];
  for (int i = 0; i < MB; ++i) a0[i] = a1[i] = v8{};
  for (std::int64_t k = 0; k < K8; k += 8) {
    __builtin_prefetch(w0 + k + 128);  // the rows stream from memory: ask for them 512 bytes ahead
    __builtin_prefetch(w1 + k + 128);
    const v8 b0 = MOSAIC_LOAD8(w0 + k), b1 = MOSAIC_LOAD8(w1 + k);
    for (int i = 0; i < MB; ++i) {
      const v8 xv = MOSAIC_LOAD8(x + i * K + k);
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
      s0 += x[i * K + k] * w0[k];
      s1 += x[i * K + k] * w1[k];
    }
    y[i * N] = s0;
    y[i * N + 1] = s1;
  }
}

}  // namespace

MOSAIC_SIMD_CLONES
void skinny_gemm(const float* x, std::int64_t M, std::int64_t K, const float* w, std::int64_t n0, std::int64_t n1, float* y,
                 std::int64_t N) {
  std::int64_t n = n0;
  for (; n + 2 <= n1; n += 2) {
    const float* w0 = w + n * K;
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
      for (std::int64_t k = 0; k < K; ++k) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
}

}  // namespace mosaic
