#include "runtime/request_stats.h"

namespace mosaic {

LayerCounts& LayerCounts::operator+=(const LayerCounts& o) {
  hits += o.hits;
  misses += o.misses;
  loads += o.loads;
  load_bytes += o.load_bytes;
  load_seconds += o.load_seconds;
  prefetches += o.prefetches;
  prefetch_used += o.prefetch_used;
  prefetch_bytes += o.prefetch_bytes;
  prefetch_seconds += o.prefetch_seconds;
  disk_loads += o.disk_loads;
  disk_bytes += o.disk_bytes;
  disk_seconds += o.disk_seconds;
  add_times(alone, o.alone);
  return *this;
}

void LayerCounts::count_load(const TierRead& r, double seconds) {
  ++loads;
  load_bytes += r.bytes;
  load_seconds += seconds;
  if (r.disk_bytes == 0) return;
  ++disk_loads;
  disk_bytes += r.disk_bytes;
  disk_seconds += r.disk_seconds;
}

LayerTime& LayerTime::operator+=(const LayerTime& o) {
  steps += o.steps;
  attention_seconds += o.attention_seconds;
  expert_seconds += o.expert_seconds;
  return *this;
}

void add_times(std::vector<LayerTime>& into, const std::vector<LayerTime>& from) {
  if (into.size() < from.size()) into.resize(from.size());
  for (std::size_t h = 0; h < from.size(); ++h) into[h] += from[h];
}

void LayerCounts::add_alone(std::int64_t hits_among_top_k, double attention_seconds, double expert_seconds) {
  const auto h = static_cast<std::size_t>(hits_among_top_k);
  if (alone.size() <= h) alone.resize(h + 1);
  alone[h] += LayerTime{1, attention_seconds, expert_seconds};
}

LayerCounts RuntimeCounters::total() const {
  LayerCounts t;
  for (const LayerCounts& l : layers) t += l;
  return t;
}

}  // namespace mosaic
