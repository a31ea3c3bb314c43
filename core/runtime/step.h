#pragma once
// One engine step as the backend sees it — the chunks of the sequences that run in it — and what it
// measured. Plain data.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/host_tier.h"
#include "runtime/logits.h"
#include "runtime/token_candidates.h"

namespace mosaic {

// A MoE layer's time over some steps, in Multi-MoE's Table 1's two parts: attention (with its KV
// reads) and the expert block after it (router, experts, and the loads its misses waited for). The
// post-attention RMSNorm counts in attention on the CPU backend and in the expert block on CUDA,
// where one kernel makes it with the router and the routing; in a CUDA step of one set whose layer
// routes on the device, that kernel makes the output projection too (a few µs of a layer), which
// then counts in the expert block as well.
struct LayerTime {
  std::int64_t steps = 0;
  double attention_seconds = 0, expert_seconds = 0;
  LayerTime& operator+=(const LayerTime& o);
};
// Adds `from` to `into` hit count by hit count, growing `into` to as many hit counts as `from` has.
void add_times(std::vector<LayerTime>& into, const std::vector<LayerTime>& from);

// Per MoE layer: routed (token, expert) pairs served from a slot (hits) or not (misses), and the
// expert loads the misses caused.
struct LayerCounts {
  std::int64_t hits = 0, misses = 0, loads = 0;
  std::uint64_t load_bytes = 0;
  double load_seconds = 0;
  // The prefetch policy: experts loaded into the layer before it routed, on the prediction made from
  // the layer before; how many of them a pair then hit (its hits include those); and the time the
  // step spent on them that nothing hid (the CPU backend's copies; the CUDA layer's wait for its
  // copy stream).
  std::int64_t prefetches = 0, prefetch_used = 0;
  std::uint64_t prefetch_bytes = 0;
  double prefetch_seconds = 0;
  // Of the loads, those whose bytes were not in the host tier's RAM (host budget): read from disk on
  // the critical path, and the time that took (part of load_seconds).
  std::int64_t disk_loads = 0;
  std::uint64_t disk_bytes = 0;
  double disk_seconds = 0;
  // One load's host read counted: a load, and a load from disk when its bytes came from there.
  void count_load(const TierRead& r, double seconds);
  // The layer's time in steps that ran one token alone — a request decoding by itself, as Multi-MoE's
  // Table 1 measured — indexed by how many of the token's top-k experts were resident. Empty until
  // such a step.
  std::vector<LayerTime> alone;
  void add_alone(std::int64_t hits_among_top_k, double attention_seconds, double expert_seconds);
  LayerCounts& operator+=(const LayerCounts& o);
};

enum class Emit { Nothing, Last, All };  // which rows of logits a chunk returns

// Where one of a token's top-k router choices went, for people to see (the workbench's expert
// trace): the expert chosen, whether it was resident (hit), loaded on demand (miss) or given no slot
// (dropped, by masked gating), and whose copy served it — a variant's or an adapter's expert, which
// differs from the token's own when the layout consolidated it away.
struct RoutedExpert {
  enum class Outcome : std::int8_t { Hit, Miss, Dropped };
  std::int32_t token = 0;   // index of the token within its chunk
  std::int16_t layer = 0;
  std::int16_t expert = 0;  // the router's choice
  Outcome outcome = Outcome::Hit;
  std::int16_t served_by = -1;      // the target whose expert ran (ExpertSource::target); -1 dropped
  std::int16_t served_expert = -1;  // which of its experts
  bool served_by_adapter = false;
};

struct StepChunk {
  int sequence = 0;  // the caller's index, for the counts
  int target = 0;    // reroute row: the variant or adapter the tokens belong to
  int buffer = 0;    // the resident-set buffer holding the weights its tokens run through
  std::span<const std::int64_t> tokens;
  std::int64_t start = 0;                // positions already cached
  std::span<const std::int32_t> blocks;  // the sequence's KV blocks: enough for start + tokens.size()
  Emit emit = Emit::Last;
  bool trace = false;  // record where each of its tokens' router choices went (StepResult::routes)
  // Emit::Last only: the row is drawn from at this temperature (0: greedy), so a backend may prepare
  // the draw (StepResult::candidates) instead of returning the row. nullopt: the row itself.
  std::optional<double> draw_temperature;
  // The engine's id of the chunk's request: a simulated device (sim_backend.h) draws each token's
  // experts from it and the token's position, so that a recomputed token routes as it did.
  std::uint64_t request = 0;
};

struct StepBatch {
  std::vector<StepChunk> chunks;  // chunks sharing a buffer are adjacent
  int sequences = 0;
};

struct StepResult {
  std::vector<Logits> logits;                    // per chunk (no rows for Emit::Nothing, nor where prepared)
  // Per chunk, or empty: the draws a backend prepared (vocab > 0) in place of the rows.
  std::vector<TokenCandidates> candidates;
  std::vector<std::vector<LayerCounts>> counts;  // [sequences][layers]
  std::vector<std::vector<RoutedExpert>> routes;  // [sequences]: traced chunks' routes, layer by layer
  double throttle_seconds = 0;  // time the device would add: space-sharing's split copy bandwidth and compute
  // Per chunk, or empty: why its values stopped being finite ("" where they did not), e.g. weights
  // whose products overflow float. Such a chunk's request fails; the others in the step are not touched.
  std::vector<std::string> failures;
  const std::string* failure(std::size_t chunk) const {
    return chunk < failures.size() && !failures[chunk].empty() ? &failures[chunk] : nullptr;
  }
  void fail(std::size_t chunks, std::size_t chunk, std::string why) {
    failures.resize(chunks);
    if (failures[chunk].empty()) failures[chunk] = std::move(why);
  }
};

}  // namespace mosaic
