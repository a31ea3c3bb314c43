#include "runtime/request_stats.h"

namespace mosaic {

LayerCounts& LayerCounts::operator+=(const LayerCounts& o) {
  hits += o.hits;
  misses += o.misses;
  loads += o.loads;
  load_bytes += o.load_bytes;
  load_seconds += o.load_seconds;
  return *this;
}

LayerCounts RuntimeCounters::total() const {
  LayerCounts t;
  for (const LayerCounts& l : layers) t += l;
  return t;
}

}  // namespace mosaic
