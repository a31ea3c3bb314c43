#pragma once
// How one family's host store maps onto the next one's when a variant is added or removed while it
// serves: a target of the same name holds the same bytes in both, so every distinct expert, tensor,
// non-expert set and packed delta a kept target reaches has its id in the next store. Ids only
// targets that are gone reached map to -1. What a runtime changed in place (Runtime::rebase)
// translates what its slots and buffers hold through this.
#include <vector>

#include "runtime/host_store.h"

namespace mosaic {

struct StoreMap {
  std::vector<int> target;       // [from.targets()]
  std::vector<ExpertId> expert;  // [from.distinct_experts()]
  std::vector<TensorId> tensor;  // [from.distinct_tensors()]
  std::vector<int> set;          // [from.sets()]
  std::vector<DeltaId> delta;    // [from.deltas()]

  ExpertId expert_of(ExpertId id) const { return id < 0 ? -1 : expert[static_cast<std::size_t>(id)]; }
  TensorId tensor_of(TensorId id) const { return id < 0 ? -1 : tensor[static_cast<std::size_t>(id)]; }
  int set_of(int id) const { return id < 0 ? -1 : set[static_cast<std::size_t>(id)]; }
  int target_of(int id) const { return id < 0 ? -1 : target[static_cast<std::size_t>(id)]; }
};

// Throws MismatchError when the stores are not of one architecture.
StoreMap map_store(const HostStore& from, const HostStore& to);

}  // namespace mosaic
