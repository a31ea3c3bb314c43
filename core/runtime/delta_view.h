#pragma once
// A packed delta (model/delta_codec.h) as the delta kernels read it: pointers into its arrays.
#include "kernels/delta_linear.h"
#include "model/delta_codec.h"

namespace mosaic {

inline kernels::DeltaView delta_view(const PackedDelta& p, const DeltaFormat& f) {
  return {p.qweight.data(), f.sparse24 ? p.meta.data() : nullptr, p.scales.data(), p.zeros.data(), p.rows, p.cols, f.group, f.bits, f.sparse24};
}

}  // namespace mosaic
