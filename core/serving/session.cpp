#include "serving/session.h"

#include <limits>

#include "common/error.h"
#include "runtime/runtime.h"

namespace mosaic {

Session::~Session() {
  engine_.reset();
  runtime_.reset();
}

std::unique_ptr<Session> Session::open(const std::vector<std::filesystem::path>& dirs, const AnalysisProgress& progress) {
  std::unique_ptr<Session> s(new Session);
  s->family_ = std::make_unique<Family>();
  for (const auto& dir : dirs) s->family_->add(std::filesystem::path(dir).lexically_normal().filename().string(), dir);
  if (s->family_->empty()) throw InvalidArgument("session", "variants", "none were given", "add at least one variant folder");
  auto analysis = analyze_family(*s->family_, {default_cache_dir(), 0, progress});
  if (!analysis) return nullptr;
  s->analysis_ = std::move(*analysis);
  s->store_ = std::make_unique<HostStore>(*s->family_);
  return s;
}

std::uint64_t Session::default_budget() const {
  const CapacityPlan unlimited = plan_capacity(*family_, std::numeric_limits<std::uint64_t>::max() / 4);
  return unlimited.minimum_budget() + unlimited.bytes_per_expert * static_cast<std::uint64_t>(unlimited.positions / 2);
}

void Session::plan(std::uint64_t budget_bytes, Policy policy) {
  const std::uint64_t budget = budget_bytes ? budget_bytes : default_budget();
  CapacityPlan cap = plan_capacity(*family_, budget);
  // Weighted without traffic shares weighs every variant alike.
  const std::vector<double> shares(policy == Policy::Weighted ? family_->size() : 0, 1.0);
  Layout layout = make_layout(*family_, analysis_.sha256, plan_consolidation(analysis_.distances, cap.capacity, policy, shares));
  layout.budget_bytes = budget;
  layout.reserve = cap.reserve;
  serve(std::move(layout), std::vector<int>(), std::move(cap));
}

void Session::apply(Layout layout) {
  const std::vector<int> to_store = match_layout(layout, *family_, analysis_.sha256, "layout");
  CapacityPlan cap = plan_capacity(*family_, layout.budget_bytes.value_or(default_budget()));
  cap.capacity = layout.plan.capacity;  // what the file holds, whatever this budget would buy
  serve(std::move(layout), to_store, std::move(cap));
}

void Session::serve(Layout layout, std::vector<int> to_store, CapacityPlan cap) {
  engine_.reset();
  runtime_.reset();
  if (to_store.empty())
    for (std::size_t i = 0; i < family_->size(); ++i) to_store.push_back(static_cast<int>(i));
  runtime_ = std::make_unique<Runtime>(*store_, layout, to_store);
  engine_ = std::make_unique<Engine>(*runtime_);
  layout_ = std::move(layout);
  capacity_ = std::move(cap);
}

Runtime& Session::runtime() {
  if (!runtime_) throw InvalidArgument("session", "runtime", "no layout has been planned yet");
  return *runtime_;
}

Engine& Session::engine() {
  if (!engine_) throw InvalidArgument("session", "engine", "no layout has been planned yet");
  return *engine_;
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
