#pragma once
// The experts each target's tokens missed on lately: what that target's next request will likely
// miss on again. Under a host budget the runtime reads a waiting request's recent misses ahead into
// RAM (host tier) before it runs, so that a disk read is on the critical path only for an expert's
// first use. Hits are not recorded: their experts are on the device already. Engine thread only.
#include <cstdint>
#include <vector>

#include "runtime/host_store.h"

namespace mosaic {

class RecentExperts {
 public:
  RecentExperts(int targets, int distinct_experts);
  void missed(int target, ExpertId expert);
  // Up to `most` of the experts `target` missed on, the most recent first.
  std::vector<ExpertId> latest(int target, std::size_t most) const;

 private:
  std::uint64_t clock_ = 0;
  int experts_ = 0;
  std::vector<std::uint64_t> stamp_;  // [targets * experts]: the clock at the last miss; 0: never
};

}  // namespace mosaic
