#pragma once
// DeltaMoE's compressed expert delta (docs/delta-format.md): Δ = W_variant − W_base of one weight
// matrix [rows = out features, cols = in features], pruned 2:4 along the input dimension (the two
// largest magnitudes of every four consecutive weights kept) or kept dense, then quantized per
// group of `group` input columns of a row to `bits` bits, asymmetric: a f16 scale and an integer
// zero per group, x̂ = (q − zero) · scale. Plain C++ on fp32 spans: no LibTorch, so it can be
// fuzzed and used by the kernels' references.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mosaic {

struct DeltaFormat {
  int bits = 4;             // 2 or 4
  bool sparse24 = true;     // 2:4 along the input dimension; false: every weight kept
  std::int64_t group = 128;  // input columns per scale and zero; a multiple of 4 when sparse
};

// One matrix's packed delta, as stored (row-major, each row starting on a fresh word).
struct PackedDelta {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint32_t> qweight;  // [rows, value_words]: kept values' codes, `bits` each, low bits first
  std::vector<std::uint32_t> meta;     // [rows, meta_words]: each kept value's place in its four, 2 bits; empty when dense
  std::vector<std::uint16_t> scales;   // [rows, groups]: f16 bits
  std::vector<std::uint8_t> zeros;     // [rows, groups]: in [0, 2^bits − 1]
};

// "4-bit, 2:4, group 128", as the CLI and the workbench name a format.
std::string format_name(const DeltaFormat& f);

// Throws InvalidArgument naming the field for bits other than 2 or 4, a group that is not positive
// (or not a multiple of 4 when sparse), or a shape the format cannot hold (cols not a multiple of 4
// when sparse).
void check_format(const DeltaFormat& f, std::int64_t rows, std::int64_t cols, const std::string& where);

std::int64_t kept_per_row(const DeltaFormat& f, std::int64_t cols);
std::int64_t value_words(const DeltaFormat& f, std::int64_t cols);
std::int64_t meta_words(const DeltaFormat& f, std::int64_t cols);
std::int64_t group_count(const DeltaFormat& f, std::int64_t cols);
std::uint64_t packed_bytes(const DeltaFormat& f, std::int64_t rows, std::int64_t cols);

// Prunes and quantizes `delta` (rows × cols, row-major, finite).
PackedDelta compress_delta(std::span<const float> delta, std::int64_t rows, std::int64_t cols, const DeltaFormat& f);

// The pieces compress_delta is made of, for compressors that decide otherwise (GPTQ, analysis/delta_gptq.h).
// A group's quantization grid for kept values in [lo, hi] (the range widened to include 0): its f16
// scale and zero; InvalidArgument naming `row` when f16 cannot hold the scale.
struct GroupGrid {
  std::uint16_t scale_bits = 0;
  float scale = 1;
  std::uint8_t zero = 0;
  std::uint8_t code(float v, const DeltaFormat& f) const;  // round(v / scale) + zero, clamped to the codes
  float value(std::uint8_t q) const { return (static_cast<float>(q) - static_cast<float>(zero)) * scale; }
};
GroupGrid group_grid(float lo, float hi, const DeltaFormat& f, std::int64_t row);
// The places of the two largest magnitudes of four values, in increasing order (ties: the earlier).
std::array<int, 2> largest_two_of_four(const float* four);
// Packs decisions made elsewhere: keep[r·cols + c] (exactly two of every four when sparse, all when
// dense), codes of the kept values at their places, and a grid per (row, group).
PackedDelta pack_decided(std::int64_t rows, std::int64_t cols, const DeltaFormat& f, std::span<const std::uint8_t> keep,
                         std::span<const std::uint8_t> codes, std::span<const GroupGrid> grids);

// Throws FormatError naming `where` when the packed arrays disagree with the shape and format, a
// zero lies outside the code range, a scale is not finite and positive, or a four's two places
// are not two distinct places in increasing order.
void check_packed(const PackedDelta& p, const DeltaFormat& f, const std::string& where);

// The dense Δ̂ the packed delta means, into `out` (rows × cols). Call check_packed first on
// anything read from a file.
void expand_delta(const PackedDelta& p, const DeltaFormat& f, std::span<float> out);
// Adds elements [begin, begin + out.size()) of the row-major Δ̂ to `out`: a range of it, for readers
// that stream a matrix in chunks.
void add_delta_range(const PackedDelta& p, const DeltaFormat& f, std::int64_t begin, std::span<float> out);

}  // namespace mosaic
