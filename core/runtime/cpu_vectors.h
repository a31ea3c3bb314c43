#pragma once
// Eight floats as GCC and Clang vectorize them (AVX in a MOSAIC_SIMD_CLONES function's x86-64-v3
// clone, SSE pairs otherwise), for the CPU backend's hand-written kernels (cpu_gemm.cpp,
// cpu_attention.cpp). Inline helpers only: a vector never crosses a call.
#include <cstdint>

namespace mosaic::cpu_vectors {

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors pass between always-inline helpers only: no ABI to keep

typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

__attribute__((always_inline)) inline v8 load8(const float* p) {
  v8 v;
  __builtin_memcpy(&v, p, 32);
  return v;
}

__attribute__((always_inline)) inline void store8(float* p, v8 v) { __builtin_memcpy(p, &v, 32); }

// A scalar added to a vector broadcasts it: one vbroadcastss, where an initializer list of eight
// copies compiled to a chain of inserts in the AVX2 clone.
__attribute__((always_inline)) inline v8 splat8(float f) { return v8{} + f; }

__attribute__((always_inline)) inline float hsum(v8 v) {
  v4 s = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  s += __builtin_shufflevector(s, s, 2, 3, 0, 1);
  s += __builtin_shufflevector(s, s, 1, 0, 3, 2);
  return s[0];
}

#pragma GCC diagnostic pop

}  // namespace mosaic::cpu_vectors
