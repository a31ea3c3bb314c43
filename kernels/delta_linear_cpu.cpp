#include "kernels/delta_linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mosaic::kernels {

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits = 0;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant != 0) {  // subnormal: normalize
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  } else {
    bits = sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

// Bits and sparsity as template arguments: the code and place arithmetic become shifts and masks.
// `N`: the tokens, fixed for 1 (decode) so the sums stay in registers; 0: any count.
template <int Bits, bool Sparse, int N>
void rows_times_x(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy) {
  constexpr int per = 32 / Bits;
  constexpr std::uint32_t mask = (1u << Bits) - 1;
  if constexpr (N > 0) n = N;
  const std::int64_t kept = Sparse ? d.cols / 2 : d.cols;
  const std::int64_t vw = (kept + per - 1) / per, mw = Sparse ? (kept + 15) / 16 : 0, groups = (d.cols + d.group - 1) / d.group;
  const std::int64_t kept_per_group = Sparse ? d.group / 2 : d.group;
  std::vector<float> acc(static_cast<std::size_t>(n)), codes_x(acc.size()), sum_x(acc.size());
  for (std::int64_t r = 0; r < d.rows; ++r) {
    const std::uint32_t* values = d.qweight + r * vw;
    const std::uint32_t* places = Sparse ? d.meta + r * mw : nullptr;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t k0 = g * kept_per_group, k1 = std::min(kept, k0 + kept_per_group);
      float cx1 = 0, sx1 = 0;  // N == 1
      if constexpr (N != 1) {
        std::fill(codes_x.begin(), codes_x.end(), 0.0f);
        std::fill(sum_x.begin(), sum_x.end(), 0.0f);
      }
      auto code = [&](std::int64_t k) { return static_cast<float>((values[k / per] >> ((k % per) * Bits)) & mask); };
      auto column = [&](std::int64_t k) -> std::int64_t {
        if constexpr (Sparse) return (k / 2) * 4 + ((places[k / 16] >> ((k % 16) * 2)) & 3u);
        return k;
      };
      std::int64_t k = k0;
      if constexpr (N == 1) {
        // Four independent sums: the adds overlap instead of waiting on one another.
        float c0 = 0, c1 = 0, c2 = 0, c3 = 0, s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (; k + 4 <= k1; k += 4) {
          const float x0 = x[column(k)], x1 = x[column(k + 1)], x2 = x[column(k + 2)], x3 = x[column(k + 3)];
          c0 += code(k) * x0;
          c1 += code(k + 1) * x1;
          c2 += code(k + 2) * x2;
          c3 += code(k + 3) * x3;
          s0 += x0;
          s1 += x1;
          s2 += x2;
          s3 += x3;
        }
        cx1 = (c0 + c1) + (c2 + c3);
        sx1 = (s0 + s1) + (s2 + s3);
      }
      for (; k < k1; ++k) {
        const float q = code(k);
        const std::int64_t c = column(k);
        if constexpr (N == 1) {
          cx1 += q * x[c];
          sx1 += x[c];
        } else {
          for (int t = 0; t < n; ++t) {
            const float xv = x[t * d.cols + c];
            codes_x[static_cast<std::size_t>(t)] += q * xv;
            sum_x[static_cast<std::size_t>(t)] += xv;
          }
        }
      }
      const float s = f16_to_float(d.scales[r * groups + g]), z = static_cast<float>(d.zeros[r * groups + g]);
      if constexpr (N == 1) {
        acc[0] += s * (cx1 - z * sx1);
      } else {
        for (int t = 0; t < n; ++t) acc[static_cast<std::size_t>(t)] += s * (codes_x[static_cast<std::size_t>(t)] - z * sum_x[static_cast<std::size_t>(t)]);
      }
    }
    for (int t = 0; t < n; ++t) {
      float& out = y[t * ldy + r];
      out = (accumulate ? out : 0.0f) + acc[static_cast<std::size_t>(t)];
    }
  }
}

template <int Bits, bool Sparse>
void dispatch_tokens(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy) {
  if (n == 1) return rows_times_x<Bits, Sparse, 1>(x, n, d, accumulate, y, ldy);
  rows_times_x<Bits, Sparse, 0>(x, n, d, accumulate, y, ldy);
}

}  // namespace

void delta_linear_cpu(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy) {
  if (!delta_linear_avx2(x, n, d, accumulate, y, ldy)) delta_linear_reference(x, n, d, accumulate, y, ldy);
}

void delta_linear_reference(const float* x, int n, const DeltaView& d, bool accumulate, float* y, std::int64_t ldy) {
  if (ldy == 0) ldy = d.rows;
  if (d.bits == 4)
    return d.sparse24 ? dispatch_tokens<4, true>(x, n, d, accumulate, y, ldy) : dispatch_tokens<4, false>(x, n, d, accumulate, y, ldy);
  d.sparse24 ? dispatch_tokens<2, true>(x, n, d, accumulate, y, ldy) : dispatch_tokens<2, false>(x, n, d, accumulate, y, ldy);
}

DeltaView delta_rows(const DeltaView& d, std::int64_t r0, std::int64_t r1) {
  const std::int64_t per = 32 / d.bits, kept = d.sparse24 ? d.cols / 2 : d.cols;
  const std::int64_t vw = (kept + per - 1) / per, mw = d.sparse24 ? (kept + 15) / 16 : 0, groups = (d.cols + d.group - 1) / d.group;
  DeltaView out = d;
  out.qweight += r0 * vw;
  if (out.meta) out.meta += r0 * mw;
  out.scales += r0 * groups;
  out.zeros += r0 * groups;
  out.rows = r1 - r0;
  return out;
}

}  // namespace mosaic::kernels
