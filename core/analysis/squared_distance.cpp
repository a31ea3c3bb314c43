#include "analysis/squared_distance.h"

#include "common/simd_clones.h"

namespace mosaic {

MOSAIC_SIMD_CLONES
float squared_distance(const float* a, const float* b, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  float acc[kLanes] = {};
  std::size_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float d = a[k + j] - b[k + j];
      acc[j] += d * d;
    }
  float s = 0.0f;
  for (std::size_t j = 0; j < kLanes; ++j) s += acc[j];
  for (; k < n; ++k) s += (a[k] - b[k]) * (a[k] - b[k]);
  return s;
}

}  // namespace mosaic
