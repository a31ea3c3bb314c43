#include "analysis/expert_distance.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>

#include "analysis/squared_distance.h"
#include "common/error.h"
#include "common/parallel.h"
#include "model/dtype_convert.h"

namespace mosaic {
namespace {

constexpr std::size_t kDistanceChunk = 65536;  // elements per variant per step: 256 KiB of fp32, in L2 with a few variants

// Squared L2 distances of every variant pair for one (layer, expert), streamed chunk by chunk.
void position_distances(const std::vector<const Checkpoint*>& ck, std::int64_t layer, std::int64_t expert,
                        std::vector<std::vector<float>>& buf, std::vector<double>& sq) {
  const std::size_t n = ck.size();
  std::fill(sq.begin(), sq.end(), 0.0);
  if (n < 2) return;  // no pairs
  const WeightNames names(ck.front()->spec());
  for (ExpertRole role : {ExpertRole::Gate, ExpertRole::Up, ExpertRole::Down}) {
    const std::string name = names.expert(layer, expert, role);
    std::vector<WeightFloats> w;
    for (std::size_t v = 0; v < n; ++v) w.emplace_back(*ck[v], ck[v]->weight(name));
    const std::size_t numel = w[0].size();
    for (std::size_t off = 0; off < numel; off += kDistanceChunk) {
      const std::size_t len = std::min(kDistanceChunk, numel - off);
      for (std::size_t v = 0; v < n; ++v) w[v].read(off, std::span(buf[v].data(), len));
      std::size_t p = 0;
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = i + 1; j < n; ++j, ++p) {
          const float* a = buf[i].data();
          const float* b = buf[j].data();
          sq[p] += squared_distance(a, b, len);  // fp32 within a chunk; chunks add up in double
        }
    }
    // Read once: its pages go back, so that analysing a family larger than RAM keeps the process
    // to its buffers (the page cache keeps what the kernel can).
    for (const WeightFloats& x : w) x.release();
  }
}

}  // namespace

Outcome<ExpertDistances> expert_distances(const Family& family, const AnalysisProgress& progress, int threads) {
  return Outcome<ExpertDistances>::of([&]() -> Outcome<ExpertDistances> {
    if (family.empty()) throw InvalidArgument("expert distances", "family", "has no variant", "open at least one variant");
    const ModelSpec& s = family.spec();
    ExpertDistances d;
    d.layers = s.num_layers;
    d.experts = s.num_experts;
    d.variants = static_cast<std::int64_t>(family.size());
    const std::size_t cells = static_cast<std::size_t>(d.layers * d.experts);
    d.position.assign(cells, std::numeric_limits<double>::quiet_NaN());
    d.pairs.assign(static_cast<std::size_t>(d.pair_count()) * cells, std::numeric_limits<double>::quiet_NaN());

    std::vector<const Checkpoint*> ck;
    for (const Variant& v : family.variants()) ck.push_back(v.checkpoint.get());
    std::vector<std::pair<std::int64_t, std::int64_t>> todo;
    for (std::int64_t l = 0; l < d.layers; ++l)
      if (s.is_sparse(l))
        for (std::int64_t e = 0; e < d.experts; ++e) todo.emplace_back(l, e);

    std::atomic<bool> cancelled{false};
    std::mutex report;
    std::int64_t done = 0;
    const unsigned workers = thread_count(threads);
    // Per thread: a chunk of every variant, and the pair sums.
    std::vector<std::vector<std::vector<float>>> buf(workers, std::vector<std::vector<float>>(ck.size(), std::vector<float>(kDistanceChunk)));
    std::vector<std::vector<double>> sq(workers, std::vector<double>(static_cast<std::size_t>(d.pair_count())));
    parallel_for(
        todo.size(), workers,
        [&](std::size_t t, unsigned w) {
          const auto [l, e] = todo[t];
          position_distances(ck, l, e, buf[w], sq[w]);
          double sum = 0;
          for (std::int64_t p = 0; p < d.pair_count(); ++p) {
            const double dist = std::sqrt(sq[w][static_cast<std::size_t>(p)]);
            d.pairs[static_cast<std::size_t>((p * d.layers + l) * d.experts + e)] = dist;  // one writer per cell
            sum += dist;
          }
          d.position[static_cast<std::size_t>(l * d.experts + e)] = sum;
          std::lock_guard lock(report);
          ++done;
          if (progress && !progress(done, static_cast<std::int64_t>(todo.size()))) cancelled = true;
        },
        [&] { return cancelled.load(); });
    if (cancelled) return Cancelled{};
    return d;
  });
}

}  // namespace mosaic
