#pragma once
// Partial runtime reconfiguration (Multi-MoE §4.2): exactly one variant's non-expert weights —
// embeddings, attention, norms, routers, shared experts, final norm, lm_head — are resident on the
// device; a request for another variant copies its set over them. Experts are not touched.
#include <cstdint>
#include <memory>

#include "runtime/device_budget.h"
#include "runtime/host_store.h"

namespace mosaic {

struct SwapRecord {
  bool swapped = false;  // false: the variant was already resident
  std::uint64_t bytes = 0;
  double seconds = 0;
};

class Reconfigurer {
 public:
  // Reserves one variant's non-expert bytes from `budget` (BudgetError when they do not fit).
  Reconfigurer(const HostStore& store, DeviceBudget& budget);
  ~Reconfigurer();
  Reconfigurer(const Reconfigurer&) = delete;
  Reconfigurer& operator=(const Reconfigurer&) = delete;

  SwapRecord ensure(int variant);
  int resident() const { return resident_; }  // -1 until the first ensure()
  const ModelWeights& weights() const { return *weights_; }

 private:
  const HostStore& store_;
  DeviceBudget& budget_;
  std::unique_ptr<ModelWeights> weights_;
  int resident_ = -1;
};

}  // namespace mosaic
