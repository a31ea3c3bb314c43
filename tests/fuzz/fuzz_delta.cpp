// Delta folders: delta.json, and a matrix's packed arrays as `delta expand` reads them (shapes
// already checked against the format, contents anything). First byte even: the rest is delta.json,
// which must round-trip through what Mosaic writes. Odd: bytes 1–3 pick the format and shape, the
// rest fills qweight, meta, scales and zeros in turn; whatever check_packed accepts must expand
// inside its bounds to finite values no larger than the codes and scales allow.
#include <cmath>
#include <cstring>
#include <vector>

#include "fuzz_target.h"
#include "model/delta_config.h"
#include "model/dtype_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  if (size < 4) return 0;
  if (data[0] % 2 == 0) {
    const auto c = fuzz::accepted([&] { return parse_delta_config(fuzz::as_text(data + 1, size - 1), "delta.json"); });
    if (!c) return 0;
    const DeltaConfig again = parse_delta_config(to_delta_json(*c), "delta.json");
    if (again.base_model != c->base_model || again.base_sha256 != c->base_sha256 || again.format.bits != c->format.bits ||
        again.format.sparse24 != c->format.sparse24 || again.format.group != c->format.group)
      fuzz::violated("delta.json does not round-trip");
    return 0;
  }
  const DeltaFormat f{.bits = data[1] & 1 ? 4 : 2, .sparse24 = (data[1] & 2) != 0, .group = 4 * (1 + (data[1] >> 2) % 16)};
  const std::int64_t rows = 1 + data[2] % 8, cols = f.sparse24 ? 4 * (1 + data[3] % 24) : 1 + data[3] % 96;
  PackedDelta p;
  p.rows = rows;
  p.cols = cols;
  p.qweight.resize(static_cast<std::size_t>(rows * value_words(f, cols)));
  p.meta.resize(static_cast<std::size_t>(rows * meta_words(f, cols)));
  p.scales.resize(static_cast<std::size_t>(rows * group_count(f, cols)));
  p.zeros.resize(static_cast<std::size_t>(rows * group_count(f, cols)));
  std::size_t at = 4;
  auto fill = [&](auto& v) {
    const std::size_t n = std::min(v.size() * sizeof(v[0]), size - at);
    if (n > 0) std::memcpy(v.data(), data + at, n);
    at += n;
  };
  fill(p.qweight);
  fill(p.meta);
  fill(p.scales);
  fill(p.zeros);
  if (!fuzz::accepted([&] { check_packed(p, f, "fuzz"); return true; })) return 0;
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  expand_delta(p, f, out);
  float largest_scale = 0;
  for (std::uint16_t s : p.scales) {
    float v = 0;
    to_float(DType::F16, reinterpret_cast<const std::byte*>(&s), std::span<float>(&v, 1));
    largest_scale = std::max(largest_scale, v);
  }
  for (float v : out)
    if (!std::isfinite(v) || std::abs(v) > static_cast<float>((1 << f.bits) - 1) * largest_scale) fuzz::violated("an expanded value lies outside what the codes and scales allow");
  return 0;
}
