#pragma once
// Function multiversioning for hot loops: an AVX2+FMA clone chosen when the program loads, the
// baseline x86-64 build otherwise. Plain code elsewhere: on other CPUs, and under ThreadSanitizer,
// which instruments the clone resolver that the loader runs before the sanitizer's runtime exists.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define MOSAIC_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MOSAIC_SIMD_CLONES
#endif
