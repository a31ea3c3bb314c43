#pragma once
// The CPU backend's slot buffers. Internal: include only from backend .cpp files.
#include <ATen/ATen.h>

#include "runtime/cpu_weights.h"

namespace mosaic {

struct SlotStorage {
  at::Tensor gate_up;  // [slots, 2*I, H]
  at::Tensor down;     // [slots, H, I]

  MlpWeights view(std::int64_t slot) const { return {gate_up[slot], down[slot]}; }
  // Copies an expert's weights into `slot`; returns the bytes moved.
  std::uint64_t load(std::int64_t slot, const MlpWeights& from) {
    gate_up[slot].copy_(from.gate_up);
    down[slot].copy_(from.down);
    return static_cast<std::uint64_t>(from.gate_up.nbytes() + from.down.nbytes());
  }
};

}  // namespace mosaic
