#include "analysis/delta_gptq.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "common/byte_size.h"
#include "common/error.h"
#include "runtime/model.h"

namespace mosaic {
namespace {

// The upper Cholesky factor U of H⁻¹ (GPTQ's), H damped; more damping where H is too ill-conditioned.
at::Tensor inverse_hessian_factor(std::span<const double> hessian, std::int64_t cols, double damp) {
  at::Tensor H = at::from_blob(const_cast<double*>(hessian.data()), {cols, cols}, at::kDouble).clone();
  at::Tensor diag = H.diagonal();
  diag.masked_fill_(diag <= 0, 1.0);  // a column no input reached: its error costs nothing, round it plainly
  const double mean = diag.mean().item<double>();
  for (double d = damp; ; d *= 10) {
    at::Tensor damped = H.clone();
    damped.diagonal().add_(d * mean);
    try {
      const at::Tensor inv = at::cholesky_inverse(at::linalg_cholesky(damped));
      return at::linalg_cholesky(inv, /*upper=*/true).contiguous();
    } catch (const c10::Error&) {
      if (d > 1e3) throw InvalidArgument("calibration", "hessian", "is not positive definite even damped", "give more calibration text");
    }
  }
}

}  // namespace

namespace {

// One GPTQ pass. `fixed` (optional): the grids to quantize to, else each group's is found at its
// start from the weights as compensated so far. `ranges` receives, per (row, group), the range of
// the kept values as they were quantized (compensated), for a second pass's grids.
PackedDelta gptq_pass(std::span<const float> delta, std::int64_t rows, std::int64_t cols, const DeltaFormat& f, const at::Tensor& U,
                      const std::vector<GroupGrid>* fixed, std::vector<std::pair<float, float>>& ranges) {
  const double* u = U.data_ptr<double>();
  // W: the delta as it is being compressed, each column's error already spread into it.
  at::Tensor W = at::from_blob(const_cast<float*>(delta.data()), {rows, cols}, at::kFloat).to(at::kDouble).contiguous();
  double* w = W.data_ptr<double>();
  const std::int64_t groups = group_count(f, cols);
  std::vector<std::uint8_t> keep(delta.size(), f.sparse24 ? 0 : 1), codes(delta.size(), 0);
  std::vector<GroupGrid> grids = fixed ? *fixed : std::vector<GroupGrid>(static_cast<std::size_t>(rows * groups));
  ranges.assign(grids.size(), {0.0f, 0.0f});
  std::vector<double> err(static_cast<std::size_t>(rows * f.group));
  std::vector<float> four(4);
  // SparseGPT's mask for the four at column c of a row: the two of largest |w| / U_jj.
  auto decide_four = [&](double* row, std::uint8_t* kept, std::int64_t c) {
    for (int j = 0; j < 4; ++j) {
      four[static_cast<std::size_t>(j)] = static_cast<float>(row[c + j] / u[(c + j) * cols + c + j]);
      kept[c + j] = 0;
    }
    for (int j : largest_two_of_four(four.data())) kept[c + j] = 1;
  };
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t c0 = g * f.group, c1 = std::min(cols, c0 + f.group), width = c1 - c0;
    for (std::int64_t r = 0; r < rows && !fixed; ++r) {
      double* row = w + r * cols;
      std::uint8_t* kept = keep.data() + r * cols;
      if (f.sparse24)
        for (std::int64_t c = c0; c < c1; c += 4) decide_four(row, kept, c);  // provisional: for the grid
      float lo = 0, hi = 0;
      for (std::int64_t c = c0; c < c1; ++c)
        if (kept[c]) {
          lo = std::min(lo, static_cast<float>(row[c]));
          hi = std::max(hi, static_cast<float>(row[c]));
        }
      grids[static_cast<std::size_t>(r * groups + g)] = group_grid(lo, hi, f, r);
    }
    // Column by column within the group: decide each four as it is reached, quantize, and spread
    // the error over the group's later columns.
    for (std::int64_t c = c0; c < c1; ++c) {
      const double d = u[c * cols + c];
      for (std::int64_t r = 0; r < rows; ++r) {
        double* row = w + r * cols;
        const auto i = static_cast<std::size_t>(r * cols + c);
        if (f.sparse24 && c % 4 == 0) decide_four(row, keep.data() + r * cols, c);
        double q = 0;
        if (keep[i]) {
          const auto gi = static_cast<std::size_t>(r * groups + g);
          ranges[gi] = {std::min(ranges[gi].first, static_cast<float>(row[c])), std::max(ranges[gi].second, static_cast<float>(row[c]))};
          codes[i] = grids[gi].code(static_cast<float>(row[c]), f);
          q = grids[gi].value(codes[i]);
        }
        const double e = (row[c] - q) / d;
        err[static_cast<std::size_t>(r * f.group + (c - c0))] = e;
        for (std::int64_t k = c + 1; k < c1; ++k) row[k] -= e * u[c * cols + k];
      }
    }
    // And over every later group at once (GPTQ's lazy batch update): W[:, c1:] −= E · U[c0:c1, c1:].
    if (c1 < cols) {
      const at::Tensor E = at::from_blob(err.data(), {rows, f.group}, at::kDouble).narrow(1, 0, width);
      W.narrow(1, c1, cols - c1).sub_(at::matmul(E, U.narrow(0, c0, width).narrow(1, c1, cols - c1)));
    }
  }
  return pack_decided(rows, cols, f, keep, codes, grids);
}

double packed_output_error(const PackedDelta& p, std::span<const float> delta, const DeltaFormat& f, std::span<const double> hessian) {
  std::vector<float> e(delta.size());
  expand_delta(p, f, e);
  for (std::size_t k = 0; k < e.size(); ++k) e[k] = delta[k] - e[k];
  return output_error_sq(e, p.rows, p.cols, hessian);
}

}  // namespace

PackedDelta compress_delta_gptq(std::span<const float> delta, std::int64_t rows, std::int64_t cols, const DeltaFormat& f,
                                std::span<const double> hessian, double damp) {
  check_format(f, rows, cols, "delta");
  if (delta.size() != static_cast<std::size_t>(rows * cols) || hessian.size() != static_cast<std::size_t>(cols * cols))
    throw InvalidArgument("delta", "values", "the delta or its Hessian does not match a " + std::to_string(rows) + " × " + std::to_string(cols) + " matrix");
  c10::NoGradGuard no_grad;
  const at::Tensor U = inverse_hessian_factor(hessian, cols, damp);
  // A grid found at a group's start can be outrun by the compensation that follows (coarse formats,
  // wide groups): a second pass quantizes to the ranges the first one met. Of the two passes and
  // plain rounding, the smallest output error on the calibration inputs is kept.
  std::vector<std::pair<float, float>> ranges, unused;
  PackedDelta best = gptq_pass(delta, rows, cols, f, U, nullptr, ranges);
  double best_error = packed_output_error(best, delta, f, hessian);
  std::vector<GroupGrid> met(ranges.size());
  const std::int64_t groups = group_count(f, cols);
  for (std::size_t i = 0; i < met.size(); ++i) met[i] = group_grid(ranges[i].first, ranges[i].second, f, static_cast<std::int64_t>(i) / groups);
  for (PackedDelta candidate : {gptq_pass(delta, rows, cols, f, U, &met, unused), compress_delta(delta, rows, cols, f)})
    if (const double e = packed_output_error(candidate, delta, f, hessian); e < best_error) {
      best_error = e;
      best = std::move(candidate);
    }
  return best;
}

double output_error_sq(std::span<const float> e, std::int64_t rows, std::int64_t cols, std::span<const double> hessian) {
  c10::NoGradGuard no_grad;
  const at::Tensor E = at::from_blob(const_cast<float*>(e.data()), {rows, cols}, at::kFloat).to(at::kDouble);
  const at::Tensor H = at::from_blob(const_cast<double*>(hessian.data()), {cols, cols}, at::kDouble);
  return (at::matmul(E, H) * E).sum().item<double>();
}

ExpertHessians ExpertHessians::collect(const Model& model, std::span<const std::int64_t> ids, std::int64_t window, std::uint64_t max_bytes) {
  const ModelSpec& s = model.spec();
  ExpertHessians h;
  h.experts_ = s.num_experts;
  h.hidden_ = s.hidden_size;
  h.intermediate_ = s.expert_intermediate;
  const auto per_expert = static_cast<std::uint64_t>(h.hidden_ * h.hidden_ + h.intermediate_ * h.intermediate_) * sizeof(double);
  const std::uint64_t need = per_expert * static_cast<std::uint64_t>(s.num_sparse_layers() * s.num_experts);
  if (need > max_bytes)
    throw InvalidArgument("--calibration", "statistics", "would take " + format_bytes(need) + " (a Hessian per expert matrix), more than " + format_bytes(max_bytes),
                          "compress without --calibration; calibrating a model this large needs a layer-by-layer pass this build does not have");
  if (window <= 0 || ids.size() < 2) throw InvalidArgument("--calibration", "text", "holds fewer than two tokens", "give a longer calibration text");
  const auto positions = static_cast<std::size_t>(s.num_layers * s.num_experts);
  h.input_.resize(positions);
  h.mid_.resize(positions);
  h.tokens_.assign(positions, 0);
  const ExpertInputSink sink = [&](std::int64_t layer, std::int64_t expert, std::span<const std::int64_t>, std::span<const float> x,
                                   std::span<const float> mid) {
    const auto p = static_cast<std::size_t>(layer * s.num_experts + expert);
    const auto n = static_cast<std::int64_t>(x.size()) / h.hidden_;
    auto add = [&](std::vector<double>& acc, std::span<const float> v, std::int64_t width) {
      if (acc.empty()) acc.assign(static_cast<std::size_t>(width * width), 0.0);
      const at::Tensor X = at::from_blob(const_cast<float*>(v.data()), {n, width}, at::kFloat).to(at::kDouble);
      at::from_blob(acc.data(), {width, width}, at::kDouble).addmm_(X.t(), X);
    };
    add(h.input_[p], x, h.hidden_);
    add(h.mid_[p], mid, h.intermediate_);
    h.tokens_[p] += n;
  };
  for (std::size_t at = 0; at < ids.size(); at += static_cast<std::size_t>(window)) {
    const std::size_t n = std::min(ids.size() - at, static_cast<std::size_t>(window));
    KvCache cache(s, 1, static_cast<std::int64_t>(n));
    forward(model, cache, ids.subspan(at, n), LogitsFor::LastPosition, nullptr, &sink);
    h.total_tokens_ += static_cast<std::int64_t>(n);
  }
  return h;
}

std::span<const double> ExpertHessians::of(std::int64_t layer, std::int64_t expert, ExpertRole role) const {
  const auto p = static_cast<std::size_t>(layer * experts_ + expert);
  if (p >= input_.size()) return {};
  return role == ExpertRole::Down ? std::span<const double>(mid_[p]) : std::span<const double>(input_[p]);
}

std::int64_t ExpertHessians::tokens(std::int64_t layer, std::int64_t expert) const {
  const auto p = static_cast<std::size_t>(layer * experts_ + expert);
  return p < tokens_.size() ? tokens_[p] : 0;
}

}  // namespace mosaic
