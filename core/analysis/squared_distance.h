#pragma once
// The inner loop of every distance in analysis/: Σ (a[k] − b[k])² in fp32.
#include <cstddef>

namespace mosaic {

// Sixteen independent fp32 lanes (so the compiler vectorizes without reassociating one sum),
// built for AVX2+FMA with a baseline fallback chosen when the program loads.
float squared_distance(const float* a, const float* b, std::size_t n);

}  // namespace mosaic
