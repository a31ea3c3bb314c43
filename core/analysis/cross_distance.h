#pragma once
// Cross-position distances between two variants (Multi-MoE Figure 2): ‖A(l, e) − B(l′, e′)‖₂ for
// every pair of MoE positions, or for the experts of one layer. Same-position distances (the
// diagonal) are small for fine-tunes of one base; cross-position ones are large, which is why
// consolidation may share an expert only at its own position.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "analysis/expert_distance.h"

namespace mosaic {

struct CrossDistances {
  std::vector<std::pair<std::int64_t, std::int64_t>> positions;  // (layer, expert), rows and columns
  std::vector<double> matrix;  // [positions × positions]: row = A's position, column = B's

  std::size_t size() const { return positions.size(); }
  double at(std::size_t a, std::size_t b) const { return matrix[a * positions.size() + b]; }
};

// `layer`: only that layer's experts; nullopt: every MoE position. Streams both checkpoints in
// chunks like expert_distances (fp32 within a chunk, double across). Throws InvalidArgument for a
// layer out of range or dense, or checkpoints of different specs, as a failed outcome.
Outcome<CrossDistances> cross_position_distances(const Checkpoint& a, const Checkpoint& b,
                                                 std::optional<std::int64_t> layer = std::nullopt,
                                                 const AnalysisProgress& progress = {}, int threads = 0);

}  // namespace mosaic
