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

typedef std::int32_t i32x8 __attribute__((vector_size(32)));

// e^x for x ≤ 88, eight at a time (Cephes' expf: x = n·ln 2 + r, |r| ≤ ln 2 / 2, e^r by its degree-5
// minimax polynomial, 2^n into the exponent bits; within 2 ulp of std::exp). Below −87.3 it returns
// e^−87.3 ≈ 1e−38 rather than a subnormal: in a softmax whose largest term is 1, nothing. Above 88
// the exponent overflows: callers clamp.
__attribute__((always_inline)) inline v8 exp8(v8 x) {
  const v8 lowest = {-87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f};
  x = x < lowest ? lowest : x;
  const v8 t = x * 1.44269504088896341f + 0.5f;
  i32x8 n = __builtin_convertvector(t, i32x8);  // toward zero; then down to the floor
  n += __builtin_convertvector(n, v8) > t;  // true is −1
  const v8 nf = __builtin_convertvector(n, v8);
  const v8 r = x - nf * 0.693359375f - nf * -2.12194440e-4f;
  v8 p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i32x8 bits = (n + 127) << 23;
  v8 scale;
  __builtin_memcpy(&scale, &bits, 32);
  return p * scale;
}

#pragma GCC diagnostic pop

}  // namespace mosaic::cpu_vectors
