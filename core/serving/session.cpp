#include "serving/session.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "analysis/layout.h"
#include "analysis/virtual_plan.h"
#include "common/error.h"
#include "serving/layout_planning.h"
#include "model/variant_folders.h"
#include "common/byte_size.h"
#include "runtime/device_plan.h"
#include "serving/hybrid_plan.h"
#include "serving/layout_serving.h"

namespace mosaic {

Session::~Session() { engine_.reset(); }

Outcome<std::unique_ptr<Session>> Session::open(const std::vector<std::filesystem::path>& dirs, const AnalysisProgress& progress,
                                                std::optional<std::uint64_t> host_budget) {
  return Outcome<std::unique_ptr<Session>>::of([&]() -> Outcome<std::unique_ptr<Session>> {
    std::unique_ptr<Session> s(new Session);
    s->family_ = std::make_unique<Family>();
    open_family(*s->family_, dirs);
    if (s->family_->empty()) throw InvalidArgument("session", "variants", "none were given", "add at least one variant folder");
    auto analysis = analyze_family(*s->family_, {default_cache_dir(), 0, progress});
    if (analysis.is_cancelled()) return Cancelled{};
    s->analysis_ = std::move(*analysis);
    s->store_ = std::make_unique<HostStore>(*s->family_, host_budget);
    return s;
  });
}

std::uint64_t Session::default_budget(Policy policy) const {
  const CapacityPlan unlimited = plan_capacity(*family_, std::numeric_limits<std::uint64_t>::max() / 4);
  if (policy != Policy::Hybrid) return half_resident_budget(unlimited);
  return hybrid_floor(*store_, *family_, reserve_).minimum_budget() + packed_delta_bytes(*store_, hybrid_base(*store_)) / 2;
}

void Session::plan(std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve, std::span<const double> given) {
  if (policy == Policy::Hybrid) return plan_hybrid(budget_bytes, reserve);
  if (policy == Policy::Virtual) return plan_virtual(budget_bytes, reserve, {});
  auto [layout, cap] = plan_consolidated(budget_bytes, policy, reserve, given);
  serve_planned(std::move(layout), own_targets(), std::move(cap), reserve);
}

std::pair<Layout, CapacityPlan> Session::plan_consolidated(std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve,
                                                           std::span<const double> given, const std::vector<std::int64_t>& layer_caps) const {
  // Room for a second non-expert set where it costs little (resident sets auto: capacity.h's rule).
  PlannedLayout planned = plan_layout(*family_, analysis_, store_->sets(),
                                      {.budget = budget_bytes ? budget_bytes : default_budget(), .policy = policy,
                                       .shares = std::vector<double>(given.begin(), given.end()), .reserve = reserve, .layer_caps = layer_caps});
  return {std::move(planned.layout), std::move(*planned.capacity)};
}

void Session::plan_hybrid(std::uint64_t budget_bytes, const ReserveSpec& reserve) {
  const int base = hybrid_base(*store_);
  CapacityPlan cap = hybrid_floor(*store_, *family_, reserve);
  const std::uint64_t budget = budget_bytes ? budget_bytes : cap.minimum_budget() + packed_delta_bytes(*store_, base) / 2;
  // The hybrid's floor (the base at every position) is above the consolidated policies' floor: say
  // so, before the runtime names whichever slot did not fit.
  if (budget < cap.minimum_budget())
    throw BudgetError("budget", format_bytes(budget),
                      "is below a hybrid layout's minimum of " + format_bytes(cap.minimum_budget()) + ": non-expert weights " +
                          format_bytes(cap.non_expert_bytes) + ", " + store_->name(base) + "'s copy at all " + std::to_string(cap.positions) +
                          " positions " + format_bytes(cap.pinned_floor) + ", reserve " + format_bytes(cap.reserve_bytes()),
                      "raise the budget, reserve less, or plan a round-robin, medoid or weighted layout, which may leave positions out");
  cap.budget_bytes = budget;
  // The runtime decides what the budget holds; the layout records what it pinned.
  RuntimeConfig config = hybrid_planning_config(*store_, analysis_.distances, budget, reserve);
  config.device = device_;
  config.cpu_weights = cpu_weights_;
  auto runtime = std::make_shared<Runtime>(*store_, std::move(config));
  Layout layout = make_layout(*family_, analysis_.sha256, hybrid_plan_from(*store_, analysis_.distances, base, runtime->config().pinned));
  layout.budget_bytes = budget;
  layout.reserve = cap.reserve;
  layout.reserve_spec = reserve;
  install(std::move(runtime), std::move(layout), std::move(cap));  // the last step that can throw
  reserve_ = reserve;
}

void Session::plan_virtual(std::uint64_t budget_bytes, const ReserveSpec& reserve, std::span<const std::int64_t> calibration) {
  const std::uint64_t budget = budget_bytes ? budget_bytes : default_budget();
  const VirtualPlanOptions options{.budget_bytes = budget, .reserve = reserve};
  Layout layout = calibration.empty() ? uniform_virtual_layout(*family_, analysis_.sha256, *store_, 0, budget, options, &analysis_.distances)
                                      : mosaic::plan_virtual(*family_, analysis_.sha256, *store_, calibration, options, &analysis_.distances);
  // Priced as the runtime charges virtual experts: no miss slots, staging slots and top-k experts
  // per layer of every variant as the floor.
  ReserveSpec masked = reserve;
  masked.miss_slots = 0;
  CapacityPlan cap = plan_capacity(*family_, budget, masked);
  cap.capacity = layout.plan.capacity;
  const ModelSpec& s = store_->spec();
  cap.pinned_floor = cap.bytes_per_expert * static_cast<std::uint64_t>(s.num_sparse_layers()) *
                     static_cast<std::uint64_t>(layout.virtual_experts->staging + s.top_k * static_cast<std::int64_t>(family_->size()));
  serve_planned(std::move(layout), own_targets(), std::move(cap), masked);
}

std::vector<int> Session::own_targets() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < family_->size(); ++i) out.push_back(static_cast<int>(i));
  return out;
}

void Session::serve_planned(Layout layout, const std::vector<int>& to_store, CapacityPlan cap, const ReserveSpec& reserve) {
  const ReserveSpec kept = reserve_;
  reserve_ = reserve;
  try {
    serve(std::move(layout), to_store, std::move(cap));
  } catch (...) {
    reserve_ = kept;  // the session is exactly as it was
    throw;
  }
}

Session::Change Session::plan_on(std::unique_ptr<Session>& previous, std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve,
                                 std::span<const double> shares) {
  if (engine_) throw std::logic_error("plan_on: the session serves on an engine of its own already");
  Change out;
  if (!previous || !previous->engine_) {
    plan(budget_bytes, policy, reserve, shares);
    out.why_rebuilt = "nothing was served before";
    return out;
  }
  if (policy == Policy::Hybrid || policy == Policy::Virtual)
    out.why_rebuilt = "hybrid and virtual-expert layouts are planned by a runtime of their own";
  else if (rebase_on(*previous, budget_bytes, policy, reserve, shares, out))
    return out;
  engine_ = std::move(previous->engine_);
  try {
    plan(budget_bytes, policy, reserve, shares);
  } catch (...) {
    previous->engine_ = std::move(engine_);  // set_runtime was not reached: it serves as it did
    throw;
  }
  retired_ = std::move(previous);
  return out;
}

bool Session::rebase_on(Session& previous, std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve, std::span<const double> shares,
                        Change& out) {
  if (!previous.runtime_) return false;
  Runtime& held = *previous.runtime_;
  auto [layout, cap] = plan_consolidated(budget_bytes, policy, reserve, shares, held.pinned_slots());
  const std::optional<RuntimeConfig> config = held.in_place(*store_, runtime_config(layout, own_targets(), cap, reserve), out.why_rebuilt);
  if (!config) return false;
  // The runtime reads this session's store from the change on; the session owns both, the store
  // outliving the runtime (members' order), as for a runtime built here.
  out.rebase = previous.engine_->rebase(std::shared_ptr<const HostStore>(std::shared_ptr<const HostStore>(), store_.get()), *config).get();
  out.in_place = true;
  out.why_rebuilt.clear();
  engine_ = std::move(previous.engine_);
  runtime_ = std::move(previous.runtime_);
  layout_ = std::move(layout);
  capacity_ = std::move(cap);
  reserve_ = reserve;
  retired_ = std::move(previous.retired_);  // a runtime it still waited for is now this session's to wait for
  return true;
}

bool Session::release_retired(double wait_seconds) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  // The engine drops the old runtime at its next turn; the retired session then holds the last reference.
  while (retired_ && retired_->runtime_ && retired_->runtime_.use_count() > 1 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (retired_ && (!retired_->runtime_ || retired_->runtime_.use_count() == 1) && retired_->release_retired()) retired_.reset();
  return !retired_;
}

bool Session::can_plan_hybrid() const {
  const std::vector<int> folders = delta_folders_over(*store_);
  return !folders.empty() && std::all_of(folders.begin(), folders.end(), [&](int t) { return store_->base_of(t) == store_->base_of(folders.front()); });
}

void Session::apply(Layout layout) {
  const std::vector<int> to_store = match_layout(layout, *family_, analysis_.sha256, "layout");
  // Served as `mosaic-cli serve --layout` serves it (layout_terms): with the reserve it was planned
  // with (the session's where the file predates recording it), within the budget it was planned
  // under (a layout planned by capacity has none, and the workbench prices it at its default budget).
  const LayoutTerms terms = layout_terms(layout, to_store, *store_, *family_, {.reserve = reserve_});
  const ReserveSpec& reserve = terms.reserve;
  const std::uint64_t budget = terms.budget.value_or(default_budget());
  CapacityPlan cap = plan_capacity(*family_, budget, reserve);
  cap.capacity = layout.plan.capacity;  // what the file holds, whatever this budget would buy
  if (layout.plan.policy == Policy::Hybrid) priced_as_hybrid(cap, *store_, layout.plan.capacity, reserve);
  layout.budget_bytes = budget;
  serve_planned(std::move(layout), to_store, std::move(cap), reserve);
}

RuntimeConfig Session::runtime_config(const Layout& layout, const std::vector<int>& to_store, const CapacityPlan& cap,
                                     const ReserveSpec& reserve) const {
  // Within the budget it was planned for, every set the budget holds beside the layout (resident sets auto).
  return layout_config(layout, to_store, *store_, *family_,
                       {.budget = cap.budget_bytes, .reserve = reserve, .resident_sets = RuntimeConfig::kAutoSets, .device = device_, .cpu_weights = cpu_weights_});
}

void Session::serve(Layout layout, const std::vector<int>& to_store, CapacityPlan cap) {
  RuntimeConfig config = runtime_config(layout, to_store, cap, reserve_);
  install(std::make_shared<Runtime>(*store_, std::move(config)), std::move(layout), std::move(cap));  // throws before anything changes
}

void Session::set_device(Device device) {
  if (device == device_) return;
  if (const auto why = device_unavailable(device))
    throw DeviceError("device " + std::string(device_name(device)), "", *why, "serve on the cpu on this machine");
  rebuild([&](RuntimeConfig& c) {
    c.device = device;
    c.cpu_weights = cpu_weights_;  // chosen while on the GPU, where it does not apply
  });
  device_ = device;
}

void Session::set_cpu_weights(CpuWeights weights) {
  if (weights == cpu_weights_) return;
  if (device_ == Device::Cpu) rebuild([&](RuntimeConfig& c) { c.cpu_weights = weights; });  // the GPU keeps bf16 either way
  cpu_weights_ = weights;
}

void Session::rebuild(const std::function<void(RuntimeConfig&)>& change) {
  if (!runtime_) return;
  RuntimeConfig config = runtime_->config();
  change(config);
  install(std::make_shared<Runtime>(*store_, std::move(config)), layout_, capacity_);  // throws before anything changes
}

void Session::install(std::shared_ptr<Runtime> runtime, Layout layout, CapacityPlan cap) {
  if (engine_) engine_->set_runtime(runtime);
  else engine_ = std::make_unique<Engine>(runtime);
  runtime_ = std::move(runtime);
  layout_ = std::move(layout);
  capacity_ = std::move(cap);
  release_retired();
}

Engine& Session::engine() {
  if (!engine_) throw InvalidArgument("session", "engine", "no layout has been planned yet");
  return *engine_;
}

const Runtime& Session::runtime() const {
  if (!runtime_) throw InvalidArgument("session", "runtime", "no layout has been planned yet");
  return *runtime_;
}

std::shared_ptr<const Tokenizer> Session::tokenizer(const std::string& variant) {
  const Variant* v = family_->find(variant);
  if (!v) throw InvalidArgument("session", "variant '" + variant + "'", "is not in the family");
  auto it = tokenizers_.find(variant);
  if (it == tokenizers_.end())
    it = tokenizers_.emplace(variant, std::make_shared<const Tokenizer>(Tokenizer::load(v->checkpoint->tokenizer_file()))).first;
  return it->second;
}

}  // namespace mosaic
