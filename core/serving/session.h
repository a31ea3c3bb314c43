#pragma once
// A family opened for interactive serving (the workbench's engine state): its variants, distances,
// host store, a layout planned from a budget and a policy, and the runtime and engine serving it.
// Not thread-safe: one thread owns a Session; the Engine it holds serves on its own thread.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analysis/capacity.h"
#include "analysis/consolidation.h"
#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "model/family.h"
#include "model/tokenizer.h"
#include "runtime/engine.h"
#include "runtime/host_store.h"

namespace mosaic {

class Session {
 public:
  // Opens `dirs` as one family (each named by its folder), analyzes it through the cache and loads
  // the host store. nullptr when `progress` cancels. Throws what Family::add and analyze_family throw.
  static std::unique_ptr<Session> open(const std::vector<std::filesystem::path>& dirs, const AnalysisProgress& progress = {});
  ~Session();

  const Family& family() const { return *family_; }
  const FamilyAnalysis& analysis() const { return analysis_; }
  const HostStore& store() const { return *store_; }

  // A budget that keeps half of the MoE positions resident.
  std::uint64_t default_budget() const;
  // Plans the resident experts for `budget_bytes` (0: default_budget()) and rebuilds the runtime and
  // engine on the new layout. Throws BudgetError (naming the minimum) for a budget too small.
  void plan(std::uint64_t budget_bytes, Policy policy);
  // Serves with a layout read from a file instead; throws MismatchError when it was made for other
  // variants or since-changed checkpoints.
  void apply(Layout layout);
  const Layout& layout() const { return layout_; }
  const CapacityPlan& capacity() const { return capacity_; }

  Runtime& runtime();  // precondition: plan() has run
  Engine& engine();
  // The variant's tokenizer.json, read once. Throws InvalidArgument for an unknown variant,
  // IoError when it has none.
  const Tokenizer& tokenizer(const std::string& variant);

 private:
  Session() = default;
  void serve(Layout layout, std::vector<int> to_store, CapacityPlan cap);  // empty to_store: family order
  std::unique_ptr<Family> family_;
  FamilyAnalysis analysis_;
  std::unique_ptr<HostStore> store_;
  Layout layout_;
  CapacityPlan capacity_;
  std::map<std::string, Tokenizer> tokenizers_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Engine> engine_;  // last: destroyed first, before the runtime it serves
};

}  // namespace mosaic
