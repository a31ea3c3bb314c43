// Layout files (mosaic.layout/1) as consolidate writes them.
#include "analysis/layout.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const auto layout = fuzz::accepted([&] { return parse_layout(fuzz::as_text(data, size), "layout.json"); });
  if (!layout) return 0;
  const ConsolidationPlan& p = layout->plan;
  const auto cells = static_cast<std::size_t>(p.layers * p.experts);
  if (p.map.size() != cells || p.rank.size() != cells || p.distance.size() != cells) fuzz::violated("grids disagree with layers × experts");
  for (const int v : p.map)
    if (v < -1 || v >= static_cast<int>(layout->variants.size())) fuzz::violated("a map cell names no variant");
  return 0;
}
