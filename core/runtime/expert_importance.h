#pragma once
// SwapMoE's expert importance (eq. 1), accumulated online: per layer, reroute row (target) and
// expert, Σ ‖x‖ · g(x) · ‖E‖ over the tokens the router — unmasked, as if every expert were resident —
// sends to the expert, each step's scores added to the earlier ones decayed. ‖E‖ is the Frobenius
// norm of the row's own expert (gate, up and down together), computed once per distinct expert.
#include <cstdint>
#include <vector>

#include "runtime/host_store.h"

namespace mosaic {

class ExpertImportance {
 public:
  ExpertImportance(const HostStore& store);

  // Adds one routed pair's score: `token_norm` ‖x‖, `gate` the router's weight g(x) for the expert.
  void add(std::int64_t layer, int row, std::int64_t expert, double token_norm, double gate);
  // Multiplies every score by `factor` (a step's decay).
  void decay(double factor);
  double score(std::int64_t layer, int row, std::int64_t expert) const {
    return scores_[index(layer, row, expert)];
  }
  // ‖E‖ of a distinct expert, from the host store's bytes (computed on first use).
  double norm(ExpertId expert);

 private:
  std::size_t index(std::int64_t layer, int row, std::int64_t expert) const {
    return static_cast<std::size_t>((layer * rows_ + row) * experts_ + expert);
  }
  const HostStore& store_;
  std::int64_t rows_, experts_;
  std::vector<double> scores_;  // [layers, rows, experts]
  std::vector<double> norms_;   // [distinct experts]: < 0 until computed
};

}  // namespace mosaic
