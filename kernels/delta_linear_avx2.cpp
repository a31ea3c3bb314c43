// The CPU delta kernel with AVX2 and FMA: eight kept values per step. Their codes come out of one
// word with a variable shift, their 2:4 places likewise, the x values they multiply are picked from
// two loads by a permute (one load without 2:4), and per token Σ q·x and Σ x accumulate in vectors,
// reduced once per group
// (docs/delta-format.md; the scalar kernel in delta_linear_cpu.cpp is the reference). Compiled for
// any x86-64 and chosen at run time where the CPU has AVX2 and FMA.
#include "kernels/delta_linear.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <algorithm>

namespace mosaic::kernels {
namespace {

#define MOSAIC_AVX2 __attribute__((target("avx2,fma")))

MOSAIC_AVX2 inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

constexpr int kTokens = 4;  // tokens sharing one decode of the codes

template <int Bits, bool Sparse>
MOSAIC_AVX2 void rows_avx2(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy) {
  constexpr int per = 32 / Bits;
  constexpr std::uint32_t mask = (1u << Bits) - 1;
  const std::int64_t kept = Sparse ? d.cols / 2 : d.cols;
  const std::int64_t vw = (kept + per - 1) / per, mw = Sparse ? (kept + 15) / 16 : 0, groups = (d.cols + d.group - 1) / d.group;
  const std::int64_t kpg = Sparse ? d.group / 2 : d.group;
  // Lane i of eight kept values k … k + 7: its code's shift in its word, its place's, its four's offset.
  const __m256i code_shift = Bits == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28) : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i place_shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i four = _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12);
  const __m256i seven = _mm256_set1_epi32(7);
  const __m256i code_mask = _mm256_set1_epi32(static_cast<int>(mask)), place_mask = _mm256_set1_epi32(3);
  for (int t0 = 0; t0 < n; t0 += kTokens) {
    const int tn = std::min(kTokens, n - t0);
    for (std::int64_t r = 0; r < d.rows; ++r) {
      const std::uint32_t* values = d.qweight + r * vw;
      const std::uint32_t* places = Sparse ? d.meta + r * mw : nullptr;
      float acc[kTokens] = {};
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t k0 = g * kpg, k1 = std::min(kept, k0 + kpg);
        __m256 cx[kTokens], sx[kTokens];
        for (int t = 0; t < tn; ++t) cx[t] = sx[t] = _mm256_setzero_ps();
        std::int64_t k = k0;
        for (; k + 8 <= k1; k += 8) {
          const std::uint32_t word = values[k / per] >> ((k % per) * Bits);
          const __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), code_shift), code_mask));
          // 2:4: the eight values lie in the sixteen columns from (k / 2) · 4; each lane picks its
          // column from two loads by a permute, cheaper than a gather.
          __m256i pick = _mm256_setzero_si256(), high = _mm256_setzero_si256();
          if constexpr (Sparse) {
            const std::uint32_t pw = places[k / 16] >> ((k % 16) * 2);
            pick = _mm256_add_epi32(four, _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(pw)), place_shift), place_mask));
            high = _mm256_cmpgt_epi32(pick, seven);
          }
          const std::int64_t first = Sparse ? (k / 2) * 4 : k;
          for (int t = 0; t < tn; ++t) {
            const float* xt = x + (t0 + t) * d.cols + first;
            __m256 xv = _mm256_loadu_ps(xt);
            if constexpr (Sparse)
              xv = _mm256_blendv_ps(_mm256_permutevar8x32_ps(xv, pick), _mm256_permutevar8x32_ps(_mm256_loadu_ps(xt + 8), pick),
                                    _mm256_castsi256_ps(high));
            cx[t] = _mm256_fmadd_ps(q, xv, cx[t]);
            sx[t] = _mm256_add_ps(sx[t], xv);
          }
        }
        float cs[kTokens] = {}, ss[kTokens] = {};
        for (; k < k1; ++k) {  // a group's last values, fewer than eight
          const float q = static_cast<float>((values[k / per] >> ((k % per) * Bits)) & mask);
          std::int64_t c = k;
          if constexpr (Sparse) c = (k / 2) * 4 + ((places[k / 16] >> ((k % 16) * 2)) & 3u);
          for (int t = 0; t < tn; ++t) {
            const float xv = x[(t0 + t) * d.cols + c];
            cs[t] += q * xv;
            ss[t] += xv;
          }
        }
        const float s = f16_to_float(d.scales[r * groups + g]), z = static_cast<float>(d.zeros[r * groups + g]);
        for (int t = 0; t < tn; ++t) acc[t] += s * ((hsum(cx[t]) + cs[t]) - z * (hsum(sx[t]) + ss[t]));
      }
      for (int t = 0; t < tn; ++t) {
        float& out = y[(t0 + t) * ldy + r];
        out = (accumulate ? out : 0.0f) + acc[t];
      }
    }
  }
}

}  // namespace

bool delta_linear_avx2(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy) {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const std::int64_t kpg = d.sparse24 ? d.group / 2 : d.group;
  // Eight values at a time from a word boundary: groups must start on one.
  if (!has || kpg % 8 != 0 || d.cols > (std::int64_t(1) << 30)) return false;
  if (ldy == 0) ldy = d.rows;
  if (d.bits == 4) d.sparse24 ? rows_avx2<4, true>(x, n, d, accumulate, y, ldy) : rows_avx2<4, false>(x, n, d, accumulate, y, ldy);
  else d.sparse24 ? rows_avx2<2, true>(x, n, d, accumulate, y, ldy) : rows_avx2<2, false>(x, n, d, accumulate, y, ldy);
  return true;
}

}  // namespace mosaic::kernels

#else

namespace mosaic::kernels {
bool delta_linear_avx2(const float*, int, const DeltaView&, bool, float*, std::int64_t) { return false; }
}  // namespace mosaic::kernels

#endif
