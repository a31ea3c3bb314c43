#include "model/delta_codec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "common/parallel.h"
#include "model/dtype_convert.h"

namespace mosaic {
namespace {

float f16_value(std::uint16_t h) {
  float f = 0;
  to_float(DType::F16, reinterpret_cast<const std::byte*>(&h), std::span<float>(&f, 1));
  return f;
}

int codes_per_word(const DeltaFormat& f) { return 32 / f.bits; }

// The two places kept in a four: the two largest magnitudes, in increasing place order (ties: the
// earlier place).
std::array<int, 2> kept_places(const float* four) {
  int a = 0, b = 1;
  if (std::abs(four[b]) > std::abs(four[a])) std::swap(a, b);
  for (int i = 2; i < 4; ++i) {
    if (std::abs(four[i]) > std::abs(four[a])) {
      b = a;
      a = i;
    } else if (std::abs(four[i]) > std::abs(four[b])) {
      b = i;
    }
  }
  return {std::min(a, b), std::max(a, b)};
}

void put(std::uint32_t* words, std::int64_t k, int per_word, int width, std::uint32_t code) {
  words[k / per_word] |= code << ((k % per_word) * width);
}
std::uint32_t get(const std::uint32_t* words, std::int64_t k, int per_word, int width) {
  return (words[k / per_word] >> ((k % per_word) * width)) & ((1u << width) - 1);
}

}  // namespace

void check_format(const DeltaFormat& f, std::int64_t rows, std::int64_t cols, const std::string& where) {
  if (f.bits != 2 && f.bits != 4) throw InvalidArgument(where, "bits", "is " + std::to_string(f.bits), "use 4 or 2");
  if (f.group <= 0 || (f.sparse24 && f.group % 4 != 0))
    throw InvalidArgument(where, "group", "is " + std::to_string(f.group) + (f.sparse24 ? "; 2:4 needs a positive multiple of 4" : "; it must be positive"),
                          "use 128 (or 64, 32)");
  if (rows <= 0 || cols <= 0) throw InvalidArgument(where, "shape", "is " + std::to_string(rows) + " × " + std::to_string(cols), "a matrix has rows and columns");
  if (f.sparse24 && cols % 4 != 0)
    throw InvalidArgument(where, "shape", "has " + std::to_string(cols) + " input columns; 2:4 needs a multiple of 4", "compress it with sparsity none");
}

std::int64_t kept_per_row(const DeltaFormat& f, std::int64_t cols) { return f.sparse24 ? cols / 2 : cols; }
std::int64_t value_words(const DeltaFormat& f, std::int64_t cols) {
  return (kept_per_row(f, cols) + codes_per_word(f) - 1) / codes_per_word(f);
}
std::int64_t meta_words(const DeltaFormat& f, std::int64_t cols) { return f.sparse24 ? (kept_per_row(f, cols) + 15) / 16 : 0; }
std::int64_t group_count(const DeltaFormat& f, std::int64_t cols) { return (cols + f.group - 1) / f.group; }

std::uint64_t packed_bytes(const DeltaFormat& f, std::int64_t rows, std::int64_t cols) {
  const auto r = static_cast<std::uint64_t>(rows);
  return r * static_cast<std::uint64_t>(4 * (value_words(f, cols) + meta_words(f, cols)) + 3 * group_count(f, cols));
}

GroupGrid group_grid(float lo, float hi, const DeltaFormat& f, std::int64_t row) {
  const float qmax = static_cast<float>((1 << f.bits) - 1);
  lo = std::min(lo, 0.0f);  // the range includes 0, as GPTQ's does: a zero delta (most of them) is exact
  hi = std::max(hi, 0.0f);
  GroupGrid g;
  g.scale_bits = float_to_f16(hi > lo ? (hi - lo) / qmax : 1.0f);
  if (f16_value(g.scale_bits) == 0.0f) g.scale_bits = 0x0001;  // a range below f16's: its smallest step
  g.scale = f16_value(g.scale_bits);
  if (!std::isfinite(g.scale))
    throw InvalidArgument("delta", "values", "row " + std::to_string(row) + " spans [" + std::to_string(lo) + ", " + std::to_string(hi) + "], past what f16 scales hold",
                          "these checkpoints are too far apart for a delta; serve the variant whole");
  g.zero = static_cast<std::uint8_t>(std::clamp(std::nearbyint(-lo / g.scale), 0.0f, qmax));
  return g;
}

std::uint8_t GroupGrid::code(float v, const DeltaFormat& f) const {
  return static_cast<std::uint8_t>(std::clamp(std::nearbyint(v / scale) + static_cast<float>(zero), 0.0f, static_cast<float>((1 << f.bits) - 1)));
}

std::array<int, 2> largest_two_of_four(const float* four) { return kept_places(four); }

PackedDelta pack_decided(std::int64_t rows, std::int64_t cols, const DeltaFormat& f, std::span<const std::uint8_t> keep,
                         std::span<const std::uint8_t> codes, std::span<const GroupGrid> grids) {
  check_format(f, rows, cols, "delta");
  const std::int64_t vw = value_words(f, cols), mw = meta_words(f, cols), groups = group_count(f, cols);
  if (keep.size() != static_cast<std::size_t>(rows * cols) || codes.size() != keep.size() || grids.size() != static_cast<std::size_t>(rows * groups))
    throw std::logic_error("pack_decided: decisions do not match the shape");
  PackedDelta p;
  p.rows = rows;
  p.cols = cols;
  p.qweight.assign(static_cast<std::size_t>(rows * vw), 0);
  p.meta.assign(static_cast<std::size_t>(rows * mw), 0);
  p.scales.resize(grids.size());
  p.zeros.resize(grids.size());
  for (std::size_t i = 0; i < grids.size(); ++i) {
    p.scales[i] = grids[i].scale_bits;
    p.zeros[i] = grids[i].zero;
  }
  const int per_word = codes_per_word(f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* kept = keep.data() + r * cols;
    const std::uint8_t* code = codes.data() + r * cols;
    if (!f.sparse24) {
      for (std::int64_t c = 0; c < cols; ++c) put(p.qweight.data() + r * vw, c, per_word, f.bits, code[c]);
      continue;
    }
    std::int64_t k = 0;  // kept values so far in this row, in column order
    for (std::int64_t c0 = 0; c0 < cols; c0 += 4) {
      for (int i = 0; i < 4; ++i)
        if (kept[c0 + i]) {
          put(p.meta.data() + r * mw, k, 16, 2, static_cast<std::uint32_t>(i));
          put(p.qweight.data() + r * vw, k++, per_word, f.bits, code[c0 + i]);
        }
      if (k != (c0 / 4 + 1) * 2) throw std::logic_error("pack_decided: a four does not keep exactly two values");
    }
  }
  return p;
}

PackedDelta compress_delta(std::span<const float> delta, std::int64_t rows, std::int64_t cols, const DeltaFormat& f) {
  check_format(f, rows, cols, "delta");
  if (delta.size() != static_cast<std::size_t>(rows * cols))
    throw InvalidArgument("delta", "values", std::to_string(delta.size()) + " values for a " + std::to_string(rows) + " × " + std::to_string(cols) + " matrix");
  const std::int64_t groups = group_count(f, cols);
  std::vector<std::uint8_t> keep(delta.size(), f.sparse24 ? 0 : 1), codes(delta.size(), 0);
  std::vector<GroupGrid> grids(static_cast<std::size_t>(rows * groups));
  // Rows are decided independently, so blocks of them go to every core (whatever --threads says: this
  // is model/, below the runtime's thread setting); a Mixtral-size family has 45 billion expert
  // weights to pack. Where several rows fail, which one the error names may vary.
  constexpr std::int64_t kBlockRows = 64;
  parallel_for(static_cast<std::size_t>((rows + kBlockRows - 1) / kBlockRows), thread_count(0), [&](std::size_t block, unsigned) {
    for (std::int64_t r = static_cast<std::int64_t>(block) * kBlockRows; r < std::min(rows, static_cast<std::int64_t>(block + 1) * kBlockRows); ++r) {
      const float* row = delta.data() + r * cols;
      std::uint8_t* kept = keep.data() + r * cols;
      if (f.sparse24)
        for (std::int64_t c = 0; c < cols; c += 4)
          for (int i : kept_places(row + c)) kept[c + i] = 1;
      for (std::int64_t g = 0; g < groups; ++g) {
        const std::int64_t c0 = g * f.group, c1 = std::min(cols, c0 + f.group);
        float lo = 0, hi = 0;
        for (std::int64_t c = c0; c < c1; ++c)
          if (kept[c]) {
            lo = std::min(lo, row[c]);
            hi = std::max(hi, row[c]);
          }
        const GroupGrid grid = group_grid(lo, hi, f, r);
        grids[static_cast<std::size_t>(r * groups + g)] = grid;
        for (std::int64_t c = c0; c < c1; ++c)
          if (kept[c]) codes[static_cast<std::size_t>(r * cols + c)] = grid.code(row[c], f);
      }
    }
  });
  return pack_decided(rows, cols, f, keep, codes, grids);
}

void check_packed(const PackedDelta& p, const DeltaFormat& f, const std::string& where) {
  check_format(f, p.rows, p.cols, where);
  auto expect = [&](std::size_t got, std::int64_t per_row, const char* what) {
    if (got != static_cast<std::size_t>(p.rows * per_row))
      throw FormatError(where, what, "holds " + std::to_string(got) + " entries; a " + std::to_string(p.rows) + " × " + std::to_string(p.cols) +
                                         " matrix at this format needs " + std::to_string(p.rows * per_row),
                        "compress the delta again");
  };
  expect(p.qweight.size(), value_words(f, p.cols), "qweight");
  expect(p.meta.size(), meta_words(f, p.cols), "meta");
  expect(p.scales.size(), group_count(f, p.cols), "scales");
  expect(p.zeros.size(), group_count(f, p.cols), "zeros");
  const std::uint8_t qmax = static_cast<std::uint8_t>((1 << f.bits) - 1);
  for (std::size_t i = 0; i < p.zeros.size(); ++i)
    if (p.zeros[i] > qmax)
      throw FormatError(where, "zeros", "entry " + std::to_string(i) + " is " + std::to_string(p.zeros[i]) + ", past the " + std::to_string(f.bits) + "-bit codes",
                        "the pack is damaged or of another format: compress the delta again");
  for (std::size_t i = 0; i < p.scales.size(); ++i) {
    const float s = f16_value(p.scales[i]);
    if (!(std::isfinite(s) && s > 0)) throw FormatError(where, "scales", "entry " + std::to_string(i) + " is " + std::to_string(s) + ", not a positive finite scale",
                                                  "the pack is damaged: compress the delta again");
  }
  if (!f.sparse24) return;
  const std::int64_t mw = meta_words(f, p.cols);
  for (std::int64_t r = 0; r < p.rows; ++r)
    for (std::int64_t four = 0; four < p.cols / 4; ++four) {
      const std::uint32_t i0 = get(p.meta.data() + r * mw, 2 * four, 16, 2), i1 = get(p.meta.data() + r * mw, 2 * four + 1, 16, 2);
      if (i0 >= i1)
        throw FormatError(where, "meta", "row " + std::to_string(r) + ", columns " + std::to_string(4 * four) + "–" + std::to_string(4 * four + 3) +
                                             ": places " + std::to_string(i0) + " and " + std::to_string(i1) + " are not two places in increasing order",
                        "the pack is damaged or not 2:4: compress the delta again");
    }
}

std::string format_name(const DeltaFormat& f) {
  return std::to_string(f.bits) + "-bit, " + (f.sparse24 ? "2:4" : "dense") + ", group " + std::to_string(f.group);
}

void expand_delta(const PackedDelta& p, const DeltaFormat& f, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  add_delta_range(p, f, 0, out);
}

void add_delta_range(const PackedDelta& p, const DeltaFormat& f, std::int64_t begin, std::span<float> out) {
  const std::int64_t vw = value_words(f, p.cols), mw = meta_words(f, p.cols), groups = group_count(f, p.cols);
  const int per_word = codes_per_word(f);
  const auto end = begin + static_cast<std::int64_t>(out.size());
  if (out.empty()) return;
  for (std::int64_t r = begin / p.cols; r <= (end - 1) / p.cols; ++r) {
    const std::uint32_t* values = p.qweight.data() + r * vw;
    const std::uint32_t* places = p.meta.data() + r * mw;
    for (std::int64_t k = 0; k < kept_per_row(f, p.cols); ++k) {
      const std::int64_t c = f.sparse24 ? (k / 2) * 4 + get(places, k, 16, 2) : k;
      const std::int64_t at = r * p.cols + c;
      if (at < begin || at >= end) continue;
      const std::int64_t g = r * groups + c / f.group;
      const float q = static_cast<float>(get(values, k, per_word, f.bits));
      out[static_cast<std::size_t>(at - begin)] +=
          (q - static_cast<float>(p.zeros[static_cast<std::size_t>(g)])) * f16_value(p.scales[static_cast<std::size_t>(g)]);
    }
  }
}

}  // namespace mosaic
