#pragma once
// Compressing a delta against calibration inputs (GPTQ, with SparseGPT's 2:4 pruning, as DeltaZip and
// DeltaMoE do): columns are pruned and quantized group by group, in order, and each column's error is
// spread over the columns not yet quantized through the inverse Hessian of the inputs, so that the
// outputs X·(Δ − Δ̂)ᵀ stay small rather than Δ − Δ̂ itself. Same format as compress_delta.
#include <cstdint>
#include <span>
#include <vector>

#include "model/delta_codec.h"
#include "model/weight_names.h"
#include "runtime/forward.h"

namespace mosaic {

// `hessian`: Σ x xᵀ of the matrix's inputs (cols × cols, row-major, symmetric positive semi-definite).
// `damp`: the fraction of its mean diagonal added to the diagonal (GPTQ's 0.01). Never worse than
// compress_delta on those inputs (it keeps whichever errs less); with a Hessian that is a multiple of
// the identity it is compress_delta exactly.
PackedDelta compress_delta_gptq(std::span<const float> delta, std::int64_t rows, std::int64_t cols, const DeltaFormat& f,
                                std::span<const double> hessian, double damp = 0.01);

// Σ eᵣ H eᵣᵀ over the rows of e (rows × cols): the squared output error a matrix error e makes on the
// inputs H was summed from.
double output_error_sq(std::span<const float> e, std::int64_t rows, std::int64_t cols, std::span<const double> hessian);

// GPTQ's statistics for every routed expert of a model: Σ x xᵀ over the tokens routed to it, of the
// input of its gate and up projections (hidden) and of its down projection (intermediate).
class ExpertHessians {
 public:
  // Runs `model` over `ids` in windows of `window` tokens, each window its own sequence. Throws
  // InvalidArgument naming --calibration when the statistics would take more than `max_bytes`.
  static ExpertHessians collect(const Model& model, std::span<const std::int64_t> ids, std::int64_t window, std::uint64_t max_bytes);

  // The Hessian of (layer, expert)'s `role` matrix; empty when no token was routed there.
  std::span<const double> of(std::int64_t layer, std::int64_t expert, ExpertRole role) const;
  std::int64_t tokens(std::int64_t layer, std::int64_t expert) const;
  std::int64_t calibration_tokens() const { return total_tokens_; }

 private:
  std::int64_t experts_ = 0, hidden_ = 0, intermediate_ = 0, total_tokens_ = 0;
  std::vector<std::vector<double>> input_, mid_;  // [layer * experts + expert]
  std::vector<std::int64_t> tokens_;
};

}  // namespace mosaic
