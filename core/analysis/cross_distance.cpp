#include "analysis/cross_distance.h"

#include <array>
#include <atomic>
#include <cmath>
#include <mutex>

#include "analysis/squared_distance.h"
#include "common/error.h"
#include "common/parallel.h"
#include "model/dtype_convert.h"

namespace mosaic {
namespace {

constexpr std::size_t kCrossChunk = 4096;  // elements per position per step
constexpr std::size_t kRows = 8;      // A positions per work item: B's chunks are reused 8 times

struct Buffers {
  std::vector<float> a, b;  // [kRows][kCrossChunk], [positions][kCrossChunk]
  std::vector<double> sq;   // [kRows][positions]
};

}  // namespace

Outcome<CrossDistances> cross_position_distances(const Checkpoint& a, const Checkpoint& b, std::optional<std::int64_t> layer,
                                                 const AnalysisProgress& progress, int threads) {
  return Outcome<CrossDistances>::of([&]() -> Outcome<CrossDistances> {
    const ModelSpec& s = a.spec();
    if (const auto diff = first_difference(s, b.spec()))
      throw InvalidArgument(b.dir().string(), "", "is not a variant of " + a.dir().string() + ": " + *diff,
                            "compare two fine-tunes of one base model");
    CrossDistances out;
    if (layer) {
      if (*layer < 0 || *layer >= s.num_layers || !s.is_sparse(*layer))
        throw InvalidArgument("cross-position distances", "layer " + std::to_string(*layer),
                              "is not an MoE layer of this model (" + std::to_string(s.num_layers) + " layers)",
                              "give the index of a sparse layer");
      for (std::int64_t e = 0; e < s.num_experts; ++e) out.positions.emplace_back(*layer, e);
    } else {
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        if (s.is_sparse(l))
          for (std::int64_t e = 0; e < s.num_experts; ++e) out.positions.emplace_back(l, e);
    }
    const std::size_t n = out.size();
    out.matrix.assign(n * n, 0.0);

    const WeightNames names(s);
    // The three matrices of each position, for both checkpoints.
    auto weights_of = [&](const Checkpoint& ck) {
      std::vector<std::array<WeightFloats, 3>> w;
      for (const auto& [l, e] : out.positions)
        w.push_back({WeightFloats(ck, ck.weight(names.expert(l, e, ExpertRole::Gate))),
                     WeightFloats(ck, ck.weight(names.expert(l, e, ExpertRole::Up))),
                     WeightFloats(ck, ck.weight(names.expert(l, e, ExpertRole::Down)))});
      return w;
    };
    const auto wa = weights_of(a), wb = weights_of(b);

    const unsigned workers = thread_count(threads);
    std::vector<Buffers> bufs(workers);
    for (Buffers& buf : bufs) {
      buf.a.resize(kRows * kCrossChunk);
      buf.b.resize(n * kCrossChunk);
      buf.sq.resize(kRows * n);
    }
    const std::size_t blocks = (n + kRows - 1) / kRows;
    std::atomic<bool> cancelled{false};
    std::mutex report;
    std::int64_t done = 0;
    parallel_for(
        blocks, workers,
        [&](std::size_t block, unsigned worker) {
          Buffers& buf = bufs[worker];
          const std::size_t r0 = block * kRows, rows = std::min(kRows, n - r0);
          std::fill(buf.sq.begin(), buf.sq.end(), 0.0);
          for (int role = 0; role < 3; ++role) {
            const std::size_t numel = wa[0][role].size();
            for (std::size_t off = 0; off < numel; off += kCrossChunk) {
              const std::size_t len = std::min(kCrossChunk, numel - off);
              for (std::size_t r = 0; r < rows; ++r) wa[r0 + r][role].read(off, std::span(&buf.a[r * kCrossChunk], len));
              for (std::size_t c = 0; c < n; ++c) wb[c][role].read(off, std::span(&buf.b[c * kCrossChunk], len));
              for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t c = 0; c < n; ++c) {
                  const float* x = &buf.a[r * kCrossChunk];
                  const float* y = &buf.b[c * kCrossChunk];
                  buf.sq[r * n + c] += squared_distance(x, y, len);
                }
            }
          }
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < n; ++c) out.matrix[(r0 + r) * n + c] = std::sqrt(buf.sq[r * n + c]);
          std::lock_guard lock(report);
          ++done;
          if (progress && !progress(done, static_cast<std::int64_t>(blocks))) cancelled = true;
        },
        [&] { return cancelled.load(); });
    if (cancelled) return Cancelled{};
    return out;
  });
}

}  // namespace mosaic
