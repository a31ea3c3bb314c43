#include "runtime/cuda/delta_block.h"

#include <cstring>

#include "runtime/delta_view.h"

namespace mosaic::cuda {
namespace {

constexpr std::size_t kAlign = 256;

std::array<const PackedDelta*, 3> parts_of(const HostDelta& d) { return {&d.gate, &d.up, &d.down}; }

template <class T>
std::size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

}  // namespace

DeltaBlock delta_block(const HostDelta& d) {
  DeltaBlock b;
  std::size_t at = 0;
  auto place = [&](std::size_t bytes) {
    const std::size_t here = at;
    at += (bytes + kAlign - 1) / kAlign * kAlign;
    return here;
  };
  const auto parts = parts_of(d);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const PackedDelta& p = *parts[i];
    b.part[i] = {place(bytes_of(p.qweight)), place(bytes_of(p.meta)), place(bytes_of(p.scales)), place(bytes_of(p.zeros))};
  }
  b.bytes = at;
  return b;
}

void write_delta_block(const HostDelta& d, const DeltaBlock& b, std::byte* to) {
  std::memset(to, 0, b.bytes);  // the alignment gaps too: a copied block holds no stale bytes
  const auto parts = parts_of(d);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const PackedDelta& p = *parts[i];
    const DeltaBlock::Matrix& m = b.part[i];
    if (!p.qweight.empty()) std::memcpy(to + m.qweight, p.qweight.data(), bytes_of(p.qweight));
    if (!p.meta.empty()) std::memcpy(to + m.meta, p.meta.data(), bytes_of(p.meta));
    if (!p.scales.empty()) std::memcpy(to + m.scales, p.scales.data(), bytes_of(p.scales));
    if (!p.zeros.empty()) std::memcpy(to + m.zeros, p.zeros.data(), bytes_of(p.zeros));
  }
}

std::array<kernels::DeltaView, 3> delta_block_views(const HostDelta& d, const DeltaBlock& b, const std::byte* at) {
  std::array<kernels::DeltaView, 3> out;
  const auto parts = parts_of(d);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const PackedDelta& p = *parts[i];
    const DeltaBlock::Matrix& m = b.part[i];
    out[i] = delta_view(p, d.format);  // its shape and format; the arrays, the block's
    out[i].qweight = reinterpret_cast<const std::uint32_t*>(at + m.qweight);
    if (d.format.sparse24) out[i].meta = reinterpret_cast<const std::uint32_t*>(at + m.meta);
    out[i].scales = reinterpret_cast<const std::uint16_t*>(at + m.scales);
    out[i].zeros = reinterpret_cast<const std::uint8_t*>(at + m.zeros);
  }
  return out;
}

}  // namespace mosaic::cuda
