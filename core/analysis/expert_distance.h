#pragma once
// Expert distances across the variants of a family (Multi-MoE, Algorithm 1): for each MoE
// position (layer, expert), the L2 distance between two variants' copies of that expert — gate, up
// and down matrices concatenated — and the position distance d(l, e), the sum over unordered pairs.
// Small d means the variants barely changed that expert, so one shared copy can serve them all.
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "common/outcome.h"
#include "model/family.h"

namespace mosaic {

struct ExpertDistances {
  std::int64_t layers = 0, experts = 0, variants = 0;
  std::vector<double> position;  // [layers * experts]; NaN in dense (non-MoE) layers
  std::vector<double> pairs;     // [pair_count * layers * experts], pairs (i, j), i < j, in row order

  std::int64_t pair_count() const { return variants * (variants - 1) / 2; }
  std::int64_t pair_index(std::int64_t i, std::int64_t j) const {  // i != j, either order
    if (i > j) std::swap(i, j);
    return i * variants - i * (i + 1) / 2 + (j - i - 1);
  }
  double at(std::int64_t layer, std::int64_t expert) const { return position[layer * experts + expert]; }
  double pair(std::int64_t i, std::int64_t j, std::int64_t layer, std::int64_t expert) const {
    return pairs[(pair_index(i, j) * layers + layer) * experts + expert];
  }
};

// Called as positions finish (from worker threads, one call at a time); returning false cancels.
using AnalysisProgress = std::function<bool(std::int64_t done, std::int64_t total)>;

// Streams every variant's experts from the mapped checkpoints in chunks (memory: threads × variants
// × chunk, whatever the model size), converting to fp32 and accumulating each chunk's squared
// differences in fp32, the chunk sums in double. threads <= 0: one per core. Cancelled when
// `progress` says so; failed (InvalidArgument) for an empty family. One variant has no pairs: its
// position distances are 0 (a sum over no pairs), so a single checkpoint plans and serves too.
Outcome<ExpertDistances> expert_distances(const Family& family, const AnalysisProgress& progress = {}, int threads = 0);

}  // namespace mosaic
