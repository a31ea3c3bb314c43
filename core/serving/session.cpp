#include "serving/session.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "model/variant_folders.h"
#include "serving/hybrid_plan.h"

namespace mosaic {

namespace {

// A hybrid plan as the runtime prices it: the base at every position whatever the budget, and miss
// slots with room for the largest packed delta.
void priced_as_hybrid(CapacityPlan& cap, const HostStore& store, std::int64_t positions, const ReserveSpec& reserve) {
  cap.reserve = plan_reserve(store.spec(), store.expert_bytes() + store.max_delta_bytes(), reserve);
  cap.capacity = positions;
  cap.pinned_floor = static_cast<std::uint64_t>(positions) * store.expert_bytes();
}

}  // namespace

Session::~Session() { engine_.reset(); }

Outcome<std::unique_ptr<Session>> Session::open(const std::vector<std::filesystem::path>& dirs, const AnalysisProgress& progress) {
  return Outcome<std::unique_ptr<Session>>::of([&]() -> Outcome<std::unique_ptr<Session>> {
    std::unique_ptr<Session> s(new Session);
    s->family_ = std::make_unique<Family>();
    open_family(*s->family_, dirs);
    if (s->family_->empty()) throw InvalidArgument("session", "variants", "none were given", "add at least one variant folder");
    auto analysis = analyze_family(*s->family_, {default_cache_dir(), 0, progress});
    if (analysis.is_cancelled()) return Cancelled{};
    s->analysis_ = std::move(*analysis);
    s->store_ = std::make_unique<HostStore>(*s->family_);
    return s;
  });
}

std::uint64_t Session::default_budget() const {
  const CapacityPlan unlimited = plan_capacity(*family_, std::numeric_limits<std::uint64_t>::max() / 4);
  return unlimited.minimum_budget() + unlimited.bytes_per_expert * static_cast<std::uint64_t>(unlimited.positions / 2);
}

void Session::plan(std::uint64_t budget_bytes, Policy policy, const ReserveSpec& reserve, std::span<const double> given) {
  const std::uint64_t budget = budget_bytes ? budget_bytes : default_budget();
  CapacityPlan cap = plan_capacity(*family_, budget, reserve);
  if (policy == Policy::Hybrid) {
    // The runtime decides what the budget holds; the layout records what it pinned.
    auto runtime = std::make_shared<Runtime>(*store_, hybrid_planning_config(*store_, analysis_.distances, budget, reserve));
    Layout layout = make_layout(*family_, analysis_.sha256,
                                hybrid_plan_from(*store_, analysis_.distances, hybrid_base(*store_), runtime->config().pinned));
    priced_as_hybrid(cap, *store_, layout.plan.capacity, reserve);
    layout.budget_bytes = budget;
    layout.reserve = cap.reserve;
    reserve_ = reserve;
    install(std::move(runtime), std::move(layout), std::move(cap));
    return;
  }
  // Weighted without traffic shares weighs every variant alike.
  std::vector<double> shares(given.begin(), given.end());
  if (policy != Policy::Weighted) shares.clear();
  else if (shares.empty()) shares.assign(family_->size(), 1.0);
  Layout layout = make_layout(*family_, analysis_.sha256, plan_consolidation(analysis_.distances, cap.capacity, policy, shares));
  layout.budget_bytes = budget;
  layout.reserve = cap.reserve;
  std::vector<int> to_store;
  for (std::size_t i = 0; i < family_->size(); ++i) to_store.push_back(static_cast<int>(i));
  const ReserveSpec kept = reserve_;
  reserve_ = reserve;
  try {
    serve(std::move(layout), to_store, std::move(cap));
  } catch (...) {
    reserve_ = kept;  // the session is exactly as it was
    throw;
  }
}

bool Session::can_plan_hybrid() const {
  const std::vector<int> folders = delta_folders_over(*store_);
  return !folders.empty() && std::all_of(folders.begin(), folders.end(), [&](int t) { return store_->base_of(t) == store_->base_of(folders.front()); });
}

void Session::apply(Layout layout) {
  const std::vector<int> to_store = match_layout(layout, *family_, analysis_.sha256, "layout");
  const std::uint64_t budget = layout.budget_bytes.value_or(default_budget());
  CapacityPlan cap = plan_capacity(*family_, budget, reserve_);
  cap.capacity = layout.plan.capacity;  // what the file holds, whatever this budget would buy
  if (layout.plan.policy == Policy::Hybrid) priced_as_hybrid(cap, *store_, layout.plan.capacity, reserve_);
  layout.budget_bytes = budget;
  serve(std::move(layout), to_store, std::move(cap));
}

void Session::serve(Layout layout, const std::vector<int>& to_store, CapacityPlan cap) {
  RuntimeConfig config;
  const bool hybrid = layout.plan.policy == Policy::Hybrid;
  config.pinned = hybrid ? hybrid_pins(*store_, layout, to_store) : pinned_from_layout(layout, to_store);
  if (hybrid) config.hit = HitPolicy::Consolidated;  // rows without their delta take the base's copy
  config.budget_bytes = cap.budget_bytes;  // the session serves within the budget it was planned for
  config.reserve = reserve_;
  install(std::make_shared<Runtime>(*store_, std::move(config)), std::move(layout), std::move(cap));  // throws before anything changes
}

void Session::install(std::shared_ptr<Runtime> runtime, Layout layout, CapacityPlan cap) {
  if (engine_) engine_->set_runtime(runtime);
  else engine_ = std::make_unique<Engine>(runtime);
  runtime_ = std::move(runtime);
  layout_ = std::move(layout);
  capacity_ = std::move(cap);
}

Engine& Session::engine() {
  if (!engine_) throw InvalidArgument("session", "engine", "no layout has been planned yet");
  return *engine_;
}

const Runtime& Session::runtime() const {
  if (!runtime_) throw InvalidArgument("session", "runtime", "no layout has been planned yet");
  return *runtime_;
}

const Tokenizer& Session::tokenizer(const std::string& variant) {
  const Variant* v = family_->find(variant);
  if (!v) throw InvalidArgument("session", "variant '" + variant + "'", "is not in the family");
  auto it = tokenizers_.find(variant);
  if (it == tokenizers_.end())
    it = tokenizers_.emplace(variant, Tokenizer::load(v->checkpoint->dir() / "tokenizer.json")).first;
  return it->second;
}

}  // namespace mosaic
