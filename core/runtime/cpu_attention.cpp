#include "runtime/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/simd_clones.h"
#include "runtime/cpu_vectors.h"

namespace mosaic {
namespace {

using cpu_vectors::v8;
using cpu_vectors::load8;
using cpu_vectors::store8;
using cpu_vectors::splat8;
using cpu_vectors::hsum;
using cpu_vectors::exp8;

// Vectors pass between always-inline helpers only: no ABI to keep. Not popped: GCC reports -Wpsabi
// when it emits code, at the end of the (unity) translation unit, where a pop would be in force.
#pragma GCC diagnostic ignored "-Wpsabi"

// out[h · stride + r] = q_h · k_r · scale for H heads and R rows at once: H·R independent sums, each key and
// query vector loaded once for all of them.
template <int H, int R>
__attribute__((always_inline)) inline void scores_block(const float* q, int kd, const float* const* k, float scale, float* out,
                                                        std::int64_t stride) {
  v8 acc[H][R];
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = v8{};
  int d = 0;
  for (; d + 8 <= kd; d += 8) {
    v8 kv[R];
    for (int r = 0; r < R; ++r) kv[r] = load8(k[r] + d);
    for (int h = 0; h < H; ++h) {
      const v8 qv = load8(q + h * kd + d);
      for (int r = 0; r < R; ++r) acc[h][r] += qv * kv[r];
    }
  }
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < R; ++r) {
      float s = hsum(acc[h][r]);
      for (int e = d; e < kd; ++e) s += q[h * kd + e] * k[r][e];
      out[h * stride + r] = s * scale;
    }
}

// acc_h += Σ_j w[h · stride + j] · v_j over vd floats, for H heads and the tile's t rows: 32 floats of
// each head's sum held in registers across the rows, each value vector loaded once for the H heads.
template <int H>
__attribute__((always_inline)) inline void values_block(float* acc, int vd, const float* w, std::int64_t stride, const float* const* v,
                                                        std::int64_t t) {
  int d = 0;
  for (; d + 32 <= vd; d += 32) {
    v8 a[H][4];
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < 4; ++c) a[h][c] = load8(acc + h * vd + d + 8 * c);
    for (std::int64_t j = 0; j < t; ++j) {
      v8 x[4];
      for (int c = 0; c < 4; ++c) x[c] = load8(v[j] + d + 8 * c);
      for (int h = 0; h < H; ++h) {
        const float wj = w[h * stride + j];
        const v8 wv = splat8(wj);
        for (int c = 0; c < 4; ++c) a[h][c] += wv * x[c];
      }
    }
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < 4; ++c) store8(acc + h * vd + d + 8 * c, a[h][c]);
  }
  for (; d < vd; ++d)
    for (int h = 0; h < H; ++h) {
      float s = acc[h * vd + d];
      for (std::int64_t j = 0; j < t; ++j) s += w[h * stride + j] * v[j][d];
      acc[h * vd + d] = s;
    }
}

// A row's lines, asked for ahead: a sequence's rows run in blocks scattered over the pool, where the
// hardware's stream prefetcher loses the thread at every block's end.
__attribute__((always_inline)) inline void prefetch_row(const float* p, std::int64_t n) {
  for (std::int64_t d = 0; d < n; d += 16) __builtin_prefetch(p + d);
}

// Tiles of rows: a tile's keys are read from memory once, for the scores of every head, and its
// values (or, under latent attention, the same key rows again) from cache. Across tiles the softmax
// runs online (flash-decoding's running maximum and sum, the sums rescaled as the maximum rises).
constexpr std::int64_t kTileRows = 16;
// The fewest rows a part of a split sequence takes: below this, merging costs more than it shares.
constexpr std::int64_t kMinPartRows = 128;

struct Part {
  std::int64_t sequence, first, last;  // rows [first, last) of the sequence's list
  std::int64_t slot;                   // its partial result's place in the scratch; −1: whole, written out
};

// One part over every head: rows [first, last) of its sequence, with the online softmax's state
// (per head its maximum, its sum of weights and its unnormalized output) written to `partial`, or —
// for a whole sequence — the normalized output written out.
MOSAIC_SIMD_CLONES
void run_part(const DecodeAttention& a, const Part& part, float* partial) {
  const int heads = a.heads, rep = a.heads / a.kv_heads, kd = a.key_dim, vd = a.value_dim;
  thread_local std::vector<float> scores, acc, high, total;
  scores.resize(static_cast<std::size_t>(heads * kTileRows));
  acc.assign(static_cast<std::size_t>(heads * vd), 0.0f);
  high.assign(static_cast<std::size_t>(heads), -INFINITY);
  total.assign(static_cast<std::size_t>(heads), 0.0f);
  const std::int64_t* rows = a.rows + a.begin[part.sequence];
  const float* q = a.q + a.tokens[part.sequence] * heads * kd;
  const bool apart = a.values != a.keys;  // values in a pool of their own (not latent attention)
  const float* kr[kTileRows];
  const float* vr[kTileRows];
  float* s = scores.data();
  for (std::int64_t i0 = part.first; i0 < part.last; i0 += kTileRows) {
    const std::int64_t t = std::min(kTileRows, part.last - i0);
    // The next tile's rows whole (every head's slice), while this one computes.
    for (std::int64_t j = i0 + t; j < std::min(part.last, i0 + t + kTileRows); ++j) {
      prefetch_row(a.keys + rows[j] * a.key_row, a.key_row);
      if (apart) prefetch_row(a.values + rows[j] * a.value_row, a.value_row);
    }
    for (int g = 0; g < a.kv_heads; ++g) {
      for (std::int64_t j = 0; j < t; ++j) {
        kr[j] = a.keys + rows[i0 + j] * a.key_row + g * kd;
        vr[j] = a.values + rows[i0 + j] * a.value_row + g * vd;
      }
      const int h0 = g * rep;
      // Scores: each key row read once for every head that shares it, two rows and four heads at a time.
      for (std::int64_t j = 0; j < t;) {
        const std::int64_t two = t - j >= 2 ? 2 : 1;
        for (int h = h0; h < h0 + rep;) {
          float* out = s + h * kTileRows + j;
          const float* qh = q + h * kd;
          if (h0 + rep - h >= 4) {
            two == 2 ? scores_block<4, 2>(qh, kd, kr + j, a.scale, out, kTileRows) : scores_block<4, 1>(qh, kd, kr + j, a.scale, out, kTileRows);
            h += 4;
          } else {
            two == 2 ? scores_block<1, 2>(qh, kd, kr + j, a.scale, out, kTileRows) : scores_block<1, 1>(qh, kd, kr + j, a.scale, out, kTileRows);
            h += 1;
          }
        }
        j += two;
      }
      // The tile's weights against the running maximum; what was summed before it rescaled to it.
      for (int h = h0; h < h0 + rep; ++h) {
        float* sh = s + h * kTileRows;
        const auto hi = static_cast<std::size_t>(h);
        const float m = std::max(high[hi], *std::max_element(sh, sh + t));
        if (m > high[hi]) {
          const float c = std::exp(high[hi] - m);
          total[hi] *= c;
          for (int d = 0; d < vd; ++d) acc[hi * static_cast<std::size_t>(vd) + static_cast<std::size_t>(d)] *= c;
          high[hi] = m;
        }
        for (std::int64_t j = 0; j < t; j += 8) store8(sh + j, exp8(load8(sh + j) - m));  // past t: never read
        float sum = 0;
        for (std::int64_t j = 0; j < t; ++j) sum += sh[j];
        total[hi] += sum;
      }
      // Values: each row's slice read from cache for two heads at a time.
      for (int h = h0; h < h0 + rep;) {
        if (h0 + rep - h >= 2) {
          values_block<2>(acc.data() + h * vd, vd, s + h * kTileRows, kTileRows, vr, t);
          h += 2;
        } else {
          values_block<1>(acc.data() + h * vd, vd, s + h * kTileRows, kTileRows, vr, t);
          h += 1;
        }
      }
    }
  }
  if (part.slot < 0) {
    float* out = a.out + a.tokens[part.sequence] * heads * vd;
    for (int h = 0; h < heads; ++h) {
      const float inv = 1.0f / total[static_cast<std::size_t>(h)];
      for (int d = 0; d < vd; ++d) out[h * vd + d] = acc[static_cast<std::size_t>(h * vd + d)] * inv;
    }
    return;
  }
  std::copy(high.begin(), high.end(), partial);
  std::copy(total.begin(), total.end(), partial + heads);
  std::copy(acc.begin(), acc.end(), partial + 2 * heads);
}

}  // namespace

void decode_attention(const DecodeAttention& a, std::int64_t sequences, int threads, const ParallelRanges& parallel) {
  if (sequences <= 0) return;
  if (a.values == a.keys && a.kv_heads != 1)  // a latent row's value starts at the key's kv head 0
    throw std::logic_error("decode_attention: values inside the key rows need one kv head");
  const std::int64_t heads = a.heads, vd = a.value_dim;
  // Each sequence whole where the sequences alone keep every thread busy; else split into parts of at
  // least kMinPartRows rows, no more parts in all than threads: parallel_for hands each thread one
  // run of consecutive parts, and a run holding two parts of one sequence would share nothing.
  const std::int64_t want = std::max<std::int64_t>(1, threads / sequences);
  std::vector<Part> parts;  // in sequence order: a split sequence's parts are consecutive
  std::int64_t slots = 0;
  for (std::int64_t b = 0; b < sequences; ++b) {
    const std::int64_t n = a.begin[b + 1] - a.begin[b];
    const std::int64_t k = std::max<std::int64_t>(1, std::min(want, n / kMinPartRows));
    for (std::int64_t i = 0; i < k; ++i) parts.push_back({b, n * i / k, n * (i + 1) / k, k == 1 ? -1 : slots++});
  }
  const std::int64_t width = 2 * heads + heads * vd;  // a partial result: maxima, sums, outputs
  std::vector<float> scratch(static_cast<std::size_t>(slots * width));
  parallel(static_cast<std::int64_t>(parts.size()), [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const Part& part = parts[static_cast<std::size_t>(p)];
      run_part(a, part, part.slot < 0 ? nullptr : scratch.data() + part.slot * width);
    }
  });
  if (slots == 0) return;
  // The parts of a split sequence added up: each rescaled to the largest of their maxima.
  for (std::size_t p0 = 0, p1 = 0; p0 < parts.size(); p0 = p1) {
    for (p1 = p0 + 1; p1 < parts.size() && parts[p1].sequence == parts[p0].sequence;) ++p1;
    if (parts[p0].slot < 0) continue;  // whole, written out
    float* out = a.out + a.tokens[parts[p0].sequence] * heads * vd;
    for (std::int64_t h = 0; h < heads; ++h) {
      float m = -INFINITY;
      for (std::size_t p = p0; p < p1; ++p) m = std::max(m, scratch[static_cast<std::size_t>(parts[p].slot * width + h)]);
      float sum = 0;
      std::fill(out + h * vd, out + (h + 1) * vd, 0.0f);
      for (std::size_t p = p0; p < p1; ++p) {
        const float* partial = scratch.data() + parts[p].slot * width;
        const float c = std::exp(partial[h] - m);
        sum += c * partial[heads + h];
        for (std::int64_t d = 0; d < vd; ++d) out[h * vd + d] += c * partial[2 * heads + h * vd + d];
      }
      for (std::int64_t d = 0; d < vd; ++d) out[h * vd + d] /= sum;
    }
  }
}

}  // namespace mosaic
