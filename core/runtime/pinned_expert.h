#pragma once
// An expert a runtime keeps in a slot for its life: `target`'s copy of (layer, expert). What a layout
// (analysis/layout.h) turns into, and a RuntimeConfig (runtime/runtime.h) pins.
#include <cstdint>

namespace mosaic {

struct PinnedExpert {
  std::int64_t layer = 0, expert = 0;
  int target = 0;
  bool operator==(const PinnedExpert&) const = default;
};

}  // namespace mosaic
