#include "runtime/runtime.h"

#include <chrono>
#include <thread>

#include "common/error.h"
#include "runtime/cpu_slots.h"
#include "runtime/forward_core.h"

namespace mosaic {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::int64_t first_sparse_layer(const ModelSpec& s) {
  std::int64_t l = 0;
  while (l < s.num_layers && !s.is_sparse(l)) ++l;
  return l;
}

std::uint64_t kv_bytes(const ModelSpec& s, std::int64_t tokens) {
  return 2 * static_cast<std::uint64_t>(s.num_layers * s.kv_width() * tokens) * sizeof(float);
}

// Holds `bytes` of the budget for as long as it lives.
class BudgetLease {
 public:
  BudgetLease(DeviceBudget& budget, std::uint64_t bytes, const std::string& what) : budget_(budget), bytes_(bytes) {
    budget_.reserve(bytes, what);
  }
  ~BudgetLease() { budget_.release(bytes_); }
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;

 private:
  DeviceBudget& budget_;
  std::uint64_t bytes_;
};

}  // namespace

LayerCounts RuntimeCounters::total() const {
  LayerCounts t;
  for (const LayerCounts& l : layers) {
    t.hits += l.hits;
    t.misses += l.misses;
    t.loads += l.loads;
    t.load_bytes += l.load_bytes;
    t.load_seconds += l.load_seconds;
  }
  return t;
}

Runtime::Runtime(const HostStore& store, const Layout& layout, const std::vector<int>& to_store, RuntimeOptions options)
    : store_(store),
      options_(options),
      budget_(options.budget_bytes.value_or(DeviceBudget::kUnlimited)),
      reconfigurer_(store, budget_) {
  const ModelSpec& s = store.spec();
  const ConsolidationPlan& plan = layout.plan;
  if (plan.layers != s.num_layers || plan.experts != s.num_experts || to_store.size() != layout.variants.size())
    throw MismatchError("layout", "map", "does not fit this model or these variants", "match the layout to the family first");
  const std::int64_t miss_slots = options.miss_slots < 0 ? s.top_k : options.miss_slots;
  if (miss_slots < 1)
    throw InvalidArgument("runtime", "miss slots", "must be at least 1: a miss needs a slot to load into");
  const std::uint64_t eb = store.expert_bytes();

  std::vector<std::int64_t> pinned(static_cast<std::size_t>(s.num_layers), 0);  // the layout's copies per layer
  std::int64_t pinned_total = 0;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l); ++e)
      if (plan.resident(l, e) >= 0) ++pinned[static_cast<std::size_t>(l)], ++pinned_total;
  // LRU spares: at least miss_slots per layer; with a budget, whatever it leaves after the pinned
  // copies and the KV room, spread evenly over the MoE layers.
  std::int64_t spare = 0, scratch = 0;
  if (options.miss == MissPolicy::Transient) {
    scratch = miss_slots;
  } else {
    spare = miss_slots;
    if (options.budget_bytes) {
      const std::uint64_t fixed = budget_.used() + static_cast<std::uint64_t>(pinned_total) * eb +
                                  kv_bytes(s, options.kv_reserve_tokens);
      if (fixed < budget_.budget())
        spare = std::max<std::int64_t>(spare, static_cast<std::int64_t>((budget_.budget() - fixed) / eb) /
                                                  std::max<std::int64_t>(1, s.num_sparse_layers()));
      spare = std::min(spare, s.num_experts * store.variants());
    }
  }

  pools_.resize(static_cast<std::size_t>(s.num_layers));
  tables_.resize(static_cast<std::size_t>(s.num_layers));
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    if (!s.is_sparse(l)) continue;
    const std::int64_t resident = pinned[static_cast<std::size_t>(l)];
    const std::uint64_t bytes = static_cast<std::uint64_t>(resident + spare + scratch) * eb;
    budget_.reserve(bytes, "expert slots of layer " + std::to_string(l) + " (" + std::to_string(resident) + " resident, " +
                               std::to_string(spare + scratch) + " for misses)");
    slot_bytes_ += bytes;
    auto pool = std::make_unique<SlotPool>(s, resident, spare, scratch);
    auto table = std::make_unique<RerouteTable>(store.variants(), s.num_experts);
    std::int64_t slot = 0;
    for (std::int64_t e = 0; e < s.num_experts; ++e) {
      const int v = plan.resident(l, e);
      if (v < 0) continue;
      const int holder = to_store[static_cast<std::size_t>(v)];
      pool->storage().load(slot, store.model(holder).weights().layers[static_cast<std::size_t>(l)].experts[static_cast<std::size_t>(e)]);
      pool->fill(slot, ExpertSource::full(holder, e));
      for (int t = 0; t < store.variants(); ++t)
        if (options.hit == HitPolicy::Consolidated || t == holder) table->set(t, e, static_cast<std::int32_t>(slot));
      ++slot;
    }
    pools_[static_cast<std::size_t>(l)] = std::move(pool);
    tables_[static_cast<std::size_t>(l)] = std::move(table);
  }
  if (options.follow_target) {
    if (pinned_total != moe_positions(s))
      throw InvalidArgument("runtime", "time-sharing", "needs every expert position pinned",
                            "use a layout that makes every position resident");
    expert_owner_ = to_store[static_cast<std::size_t>(plan.resident(first_sparse_layer(s), 0))];
    for (auto& table : tables_)  // the pinned slots serve only their owner
      if (table)
        for (int t = 0; t < store.variants(); ++t)
          for (std::int64_t e = 0; e < s.num_experts; ++e)
            if (t != expert_owner_) table->set(t, e, RerouteTable::kMiss);
  }
  if (!options.swap_non_expert) reconfigurer_.ensure(to_store.at(0));  // fixed for the runtime's life
}

double Runtime::throttle(double copy_seconds) const {
  if (options_.copy_slowdown <= 1.0) return copy_seconds;
  const double extra = copy_seconds * (options_.copy_slowdown - 1.0);
  std::this_thread::sleep_for(std::chrono::duration<double>(extra));
  return copy_seconds + extra;
}

void Runtime::reload_pinned(int target, RuntimeCounters& counters) {
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t bytes = 0;
  for (std::size_t l = 0; l < pools_.size(); ++l) {
    if (!pools_[l]) continue;
    SlotPool& pool = *pools_[l];
    RerouteTable& table = *tables_[l];
    for (std::int64_t slot = 0; slot < pool.count(SlotPool::Role::Pinned); ++slot) {
      const std::int64_t e = pool.source(slot).expert;
      bytes += pool.storage().load(slot, store_.model(target).weights().layers[l].experts[static_cast<std::size_t>(e)]);
      pool.fill(slot, ExpertSource::full(target, e));
      table.set(expert_owner_, e, RerouteTable::kMiss);
      table.set(target, e, static_cast<std::int32_t>(slot));
    }
  }
  expert_owner_ = target;
  counters.swap_bytes += bytes;
  counters.swap_seconds += throttle(seconds_since(t0));
}

Runtime::~Runtime() { budget_.release(slot_bytes_); }

RuntimeCounters Runtime::new_counters() const {
  RuntimeCounters c;
  c.layers.resize(static_cast<std::size_t>(store_.spec().num_layers));
  return c;
}

void Runtime::reconfigure(int target, RuntimeCounters& counters) {
  if (target < 0 || target >= store_.variants())
    throw InvalidArgument("runtime", "target " + std::to_string(target), "is not a variant of the store");
  if (!options_.swap_non_expert && !(options_.follow_target && target != expert_owner_)) return;
  const SwapRecord r = options_.swap_non_expert ? reconfigurer_.ensure(target) : SwapRecord{};
  const bool experts = options_.follow_target && target != expert_owner_;
  if (!r.swapped && !experts) return;
  ++counters.swaps;
  counters.swap_bytes += r.bytes;
  counters.swap_seconds += throttle(r.seconds);
  if (experts) reload_pinned(target, counters);
}

Logits Runtime::forward(int target, KvCache& cache, std::span<const std::int64_t> ids, LogitsFor which,
                        RuntimeCounters& counters) {
  if (counters.layers.size() != static_cast<std::size_t>(store_.spec().num_layers)) counters.layers = new_counters().layers;
  reconfigure(target, counters);
  return forward_with(
      store_.spec(), reconfigurer_.weights(), cache, ids, which,
      [&](std::int64_t layer, const at::Tensor& x, const ExpertGroups& g, at::Tensor& out) {
        SlotPool& pool = *pools_[static_cast<std::size_t>(layer)];
        RerouteTable& table = *tables_[static_cast<std::size_t>(layer)];
        LayerCounts& count = counters.layers[static_cast<std::size_t>(layer)];
        for (std::size_t e = 0; e < g.rows.size(); ++e) {
          if (g.rows[e].empty()) continue;
          const auto expert = static_cast<std::int64_t>(e);
          const auto routed = static_cast<std::int64_t>(g.rows[e].size());
          std::int32_t slot = table.at(target, expert);
          if (slot != RerouteTable::kMiss) {
            count.hits += routed;
          } else {
            // A miss: the target's own expert from the host into a scratch or spare slot.
            count.misses += routed;
            const auto role = options_.miss == MissPolicy::Transient ? SlotPool::Role::Scratch : SlotPool::Role::Spare;
            slot = static_cast<std::int32_t>(*pool.take(role));
            const ExpertSource evicted = pool.source(slot);
            if (!evicted.empty()) table.set(evicted.variant, evicted.expert, RerouteTable::kMiss);
            const auto t0 = std::chrono::steady_clock::now();
            count.load_bytes += pool.storage().load(
                slot, store_.model(target).weights().layers[static_cast<std::size_t>(layer)].experts[e]);
            count.load_seconds += throttle(seconds_since(t0));
            ++count.loads;
            pool.fill(slot, ExpertSource::full(target, expert));
            if (options_.miss == MissPolicy::Lru) table.set(target, expert, slot);
          }
          pool.touch(slot);
          add_expert(x, g.rows[e], g.weights[e], pool.storage().view(slot), out);
          if (options_.miss == MissPolicy::Transient && pool.role(slot) == SlotPool::Role::Scratch) pool.clear(slot);
        }
      });
}

GenerationResult Runtime::generate(int target, const GenerationRequest& request, RuntimeCounters& counters,
                                   const TokenCallback& on_token) {
  const std::int64_t tokens = static_cast<std::int64_t>(request.prompt.size()) + request.max_new_tokens;
  const BudgetLease kv(budget_, kv_bytes(store_.spec(), tokens), "KV cache of " + std::to_string(tokens) + " tokens");
  return mosaic::generate(
      store_.spec(),
      [&](KvCache& cache, std::span<const std::int64_t> ids, LogitsFor which) { return forward(target, cache, ids, which, counters); },
      request, on_token);
}

}  // namespace mosaic
