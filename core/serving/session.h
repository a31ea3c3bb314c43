#pragma once
// A family opened for interactive serving (the workbench's engine state): its variants, distances,
// host store, a layout planned from a budget and a policy, and the one engine that serves it — the
// chat's requests and a sweep's alike. Not thread-safe: one thread owns a Session; its Engine serves
// on a thread of its own and accepts requests from any.
#include <functional>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "runtime/capacity.h"
#include "analysis/consolidation.h"
#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "common/outcome.h"
#include "model/family.h"
#include "model/tokenizer.h"
#include "runtime/device.h"
#include "runtime/engine.h"
#include "runtime/host_store.h"

namespace mosaic {

class Session {
 public:
  // Opens the variant folders (model/variant_folders.h) as one family, analyzes it through the cache
  // and loads the host store, keeping `host_budget` of its distinct bytes in RAM (nullopt: all).
  // Cancelled when `progress` says so; failed with what opening or analyzing throws (BudgetError for
  // a host budget below its minimum).
  static Outcome<std::unique_ptr<Session>> open(const std::vector<std::filesystem::path>& dirs,
                                                const AnalysisProgress& progress = {},
                                                std::optional<std::uint64_t> host_budget = std::nullopt);
  ~Session();

  const Family& family() const { return *family_; }
  const FamilyAnalysis& analysis() const { return analysis_; }
  const HostStore& store() const { return *store_; }

  // A budget that keeps half of the MoE positions resident; for Policy::Hybrid, the base's copy at
  // every position and half of the delta folders' packed deltas.
  std::uint64_t default_budget(Policy policy = Policy::RoundRobin) const;
  // Plans the resident experts for `budget_bytes` (0: default_budget()) and serves them within that
  // budget. Throws BudgetError (naming the minimum) for a budget too small; the session is then
  // exactly as it was.
  // `reserve`: what the budget keeps beside the experts (KV context × requests, the prefill chunk's
  // activations, miss slots). `shares`: the weighted policy's traffic share per variant (family
  // order; empty: alike); InvalidArgument when they do not fit the family. Policy::Hybrid (delta
  // folders over their base, serving/hybrid_plan.h): the base everywhere and as many deltas as the
  // budget holds; InvalidArgument when the family has no delta folder over a base it holds.
  // Policy::Virtual: SwapMoE's virtual experts, uniform counts (the most the budget holds), the sets
  // moving with the traffic; plan_virtual() plans them on calibration text instead.
  void plan(std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve = {}, std::span<const double> shares = {});
  // What plan_on() did.
  struct Change {
    bool in_place = false;    // served over the runtime serving already: its slots, KV cache and sets kept
    RebaseResult rebase;      // in place: the experts kept, and those copied into slots whose owner changed
    std::string why_rebuilt;  // not in place: why a runtime was built anew
  };
  // plan(), served on `previous`'s engine instead of a new one, so that its running requests (and an
  // HTTP server on it) carry on. Where the consolidated layout planned into the slots its runtime
  // holds a layer fits that runtime (Runtime::in_place), the runtime is rebased onto this family
  // between steps: running requests keep their KV cache, only experts whose owner changed are
  // copied. Else the engine takes a new runtime and running requests are recomputed under it.
  // `previous` is kept until its runtime is let go (released_retired()). On failure nothing changes:
  // `previous` keeps its engine. Precondition: this session has no engine yet.
  Change plan_on(std::unique_ptr<Session>& previous, std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve = {},
                 std::span<const double> shares = {});
  // Frees a session replaced by plan_on() once the engine has let go of its runtime; true when none
  // is held any more. Waits up to `wait_seconds` for that.
  bool release_retired(double wait_seconds = 0);
  // Virtual experts with counts planned on `calibration` (token ids) for the budget
  // (analysis/virtual_plan.h). Throws as plan_virtual does; the session is then as it was.
  void plan_virtual(std::uint64_t budget_bytes, const ReserveSpec& reserve, std::span<const std::int64_t> calibration);
  // Serves with a layout read from a file instead, within its budget (or the default one). Throws
  // MismatchError when it was made for other variants or since-changed checkpoints, BudgetError when
  // it does not fit; the session is then as it was.
  void apply(Layout layout);
  bool can_plan_hybrid() const;  // whether the family has delta folders over one base it holds
  const Layout& layout() const { return layout_; }
  const CapacityPlan& capacity() const { return capacity_; }
  const ReserveSpec& reserve() const { return reserve_; }  // what the layout on screen was planned to keep

  // The backend every runtime of this session computes on (cpu until told). Serves the layout on
  // screen there at once when one is served; throws DeviceError (no GPU, no CUDA build) or
  // BudgetError (the layout's budget is beyond the device) and the session is then as it was.
  void set_device(Device device);
  Device device() const { return device_; }
  // How the CPU backend holds weights (runtime/device.h: stored, fp32, or read in place); serves the
  // layout on screen that way at once when one is served. Throws InvalidArgument (read in place
  // under a host budget) and the session is then as it was.
  void set_cpu_weights(CpuWeights weights);
  CpuWeights cpu_weights() const { return cpu_weights_; }

  Engine& engine();  // precondition: plan() or apply() has succeeded
  bool planned() const { return runtime_ != nullptr; }  // whether one has
  const Runtime& runtime() const;
  // The variant's tokenizer.json, read once; shared, so that a stream decoding with it outlives a
  // change of family. Throws InvalidArgument for an unknown variant, IoError when it has none.
  std::shared_ptr<const Tokenizer> tokenizer(const std::string& variant);

 private:
  Session() = default;
  void plan_hybrid(std::uint64_t budget_bytes, const ReserveSpec& reserve);
  // A round-robin, medoid or weighted layout for `budget_bytes` (0: the default), each sparse layer
  // pinning at most `layer_caps` of it where given.
  std::pair<Layout, CapacityPlan> plan_consolidated(std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve,
                                                    std::span<const double> shares, const std::vector<std::int64_t>& layer_caps = {}) const;
  // plan_on()'s change in place, when `previous`'s runtime holds the layout planned into its slots;
  // false (and why in `out`) when it does not.
  bool rebase_on(Session& previous, std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve, std::span<const double> shares,
                 Change& out);
  // A layout planned on this family as the store's targets: its variants in order (match_layout's
  // answer for a layout planned here).
  std::vector<int> own_targets() const;
  RuntimeConfig runtime_config(const Layout& layout, const std::vector<int>& to_store, const CapacityPlan& cap, const ReserveSpec& reserve) const;
  void serve(Layout layout, const std::vector<int>& to_store, CapacityPlan cap);
  // serve() a layout planned with `reserve`, which becomes the session's only if it serves.
  void serve_planned(Layout layout, const std::vector<int>& to_store, CapacityPlan cap, const ReserveSpec& reserve);
  void install(std::shared_ptr<Runtime> runtime, Layout layout, CapacityPlan cap);  // cannot throw past set_runtime
  std::unique_ptr<Family> family_;
  FamilyAnalysis analysis_;
  std::unique_ptr<HostStore> store_;
  Layout layout_;
  CapacityPlan capacity_;
  ReserveSpec reserve_;
  Device device_ = Device::Cpu;
  CpuWeights cpu_weights_ = CpuWeights::Stored;
  // The runtime on screen rebuilt with `change` made to its config (its pins, budget and policies as
  // they are); throws before anything changes.
  void rebuild(const std::function<void(RuntimeConfig&)>& change);
  std::map<std::string, std::shared_ptr<const Tokenizer>> tokenizers_;
  std::shared_ptr<Runtime> runtime_;
  std::unique_ptr<Session> retired_;  // replaced by plan_on(), its runtime maybe still in the engine's hands
  std::unique_ptr<Engine> engine_;  // last: destroyed first
};

}  // namespace mosaic
