#pragma once
// DeltaMoE's delta folders (docs/delta-format.md): a fine-tune written as its base plus packed
// expert deltas, and the dense checkpoint such a folder means.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "model/checkpoint.h"
#include "model/delta_codec.h"

namespace mosaic {
class ExpertHessians;
}

namespace mosaic {

// What compressing one MoE layer's experts gave: bytes as the variant stores them and as packed,
// and the squared Frobenius norms for relative errors.
struct DeltaLayerReport {
  std::int64_t layer = 0;
  std::uint64_t dense_bytes = 0, packed_bytes = 0;
  double weight_sq = 0;  // ‖W_variant‖²
  double delta_sq = 0;   // ‖Δ‖²
  double error_sq = 0;   // ‖Δ − Δ̂‖² = ‖W_variant − (W_base + Δ̂)‖²
  // Calibrated matrices only: Σ over their rows of eHeᵀ for e = Δ − Δ̂ and for e = W_variant, H the
  // Hessian of their inputs — the squared output error and output, on the calibration tokens.
  double output_error_sq = 0, output_sq = 0, rounded_output_error_sq = 0;  // the last: compress_delta's, for comparison
  int calibrated = 0, matrices = 0;  // matrices compressed against their inputs, of all
};

struct DeltaReport {
  std::vector<DeltaLayerReport> layers;
  std::uint64_t variant_bytes = 0;  // every tensor of the variant
  std::uint64_t folder_bytes = 0;   // its non-expert tensors and the packed deltas
};

// Writes `out`: the variant's files and non-expert tensors, its experts as deltas from `base`, and
// delta.json naming the base (relative to `out`) and its checkpoint hash. MismatchError when the
// two are not one architecture; InvalidArgument for a format the shapes cannot take. All or
// nothing, as merges are written.
// `calibration` (optional): the variant's expert input statistics; each matrix with tokens routed to
// it is compressed with GPTQ against them (analysis/delta_gptq.h), the rest by plain rounding.
DeltaReport write_delta(const Checkpoint& base, const Checkpoint& variant, const DeltaFormat& format, const std::filesystem::path& out,
                        const ExpertHessians* calibration = nullptr);

// Writes the dense checkpoint a delta folder means: its non-expert tensors as stored, each expert
// base + Δ̂ in fp32. MismatchError when the base found is not the one the deltas were taken from;
// FormatError naming the tensor for a damaged or misshapen pack.
void write_expanded(const std::filesystem::path& delta_dir, const std::filesystem::path& out);

}  // namespace mosaic
