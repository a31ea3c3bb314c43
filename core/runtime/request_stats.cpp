#include "runtime/request_stats.h"

namespace mosaic {

LayerCounts& LayerCounts::operator+=(const LayerCounts& o) {
  hits += o.hits;
  misses += o.misses;
  loads += o.loads;
  load_bytes += o.load_bytes;
  load_seconds += o.load_seconds;
  if (alone.size() < o.alone.size()) alone.resize(o.alone.size());
  for (std::size_t h = 0; h < o.alone.size(); ++h) {
    alone[h].steps += o.alone[h].steps;
    alone[h].attention_seconds += o.alone[h].attention_seconds;
    alone[h].expert_seconds += o.alone[h].expert_seconds;
  }
  return *this;
}

void LayerCounts::add_alone(std::int64_t hits_among_top_k, double attention_seconds, double expert_seconds) {
  const auto h = static_cast<std::size_t>(hits_among_top_k);
  if (alone.size() <= h) alone.resize(h + 1);
  ++alone[h].steps;
  alone[h].attention_seconds += attention_seconds;
  alone[h].expert_seconds += expert_seconds;
}

LayerCounts RuntimeCounters::total() const {
  LayerCounts t;
  for (const LayerCounts& l : layers) t += l;
  return t;
}

}  // namespace mosaic
