#include "runtime/runtime.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/byte_size.h"
#include "common/error.h"
#include "runtime/device_plan.h"
#include "runtime/device_timer.h"
#include "runtime/sim_backend.h"
#include "runtime/threads.h"

namespace mosaic {
namespace {

void check_config(const HostStore& store, const RuntimeConfig& c) {
  const ModelSpec& s = store.spec();
  const int targets = store.targets();
  auto bad = [](const std::string& field, const std::string& problem) { throw InvalidArgument("runtime", field, problem); };
  if (!c.non_expert_of.empty() && c.non_expert_of.size() != static_cast<std::size_t>(targets))
    bad("non-expert sets", std::to_string(c.non_expert_of.size()) + " entries for " + std::to_string(targets) + " targets");
  for (int t : c.non_expert_of)
    if (t < 0 || t >= targets) bad("non-expert sets", "names target " + std::to_string(t) + ", not one of the store's");
  for (const auto& [name, t] : c.aliases)
    if (t < 0 || t >= targets) bad("alias '" + name + "'", "names target " + std::to_string(t) + ", not one of the store's");
  if (c.resident_sets < 0) bad("resident sets", "must be at least 1, or auto");
  if (!(c.copy_slowdown >= 1.0)) bad("copy slowdown", "must be at least 1");
  if (!(c.compute_slowdown >= 1.0)) bad("compute slowdown", "must be at least 1");
  if (c.kv_block_tokens < 1) bad("KV block tokens", "must be at least 1");
  // A budget stands for the device's memory (host memory on the CPU): one beyond what the device has
  // bounds nothing, and the run would fail for memory long before the budget said no.
  if (const auto memory = device_memory_bytes(c.device); !c.simulated && memory && c.budget_bytes && *c.budget_bytes > *memory) {
    const std::string what = c.device == Device::Cpu ? "this machine's memory" : "the GPU's memory";
    throw InvalidArgument("runtime", "budget", format_bytes(*c.budget_bytes) + " is more than " + what + " (" + format_bytes(*memory) +
                                                   "), so it would bound nothing",
                          "give a budget of at most " + format_bytes(*memory) + ", or none");
  }
  if (!store.has_bytes() && !c.simulated)
    throw InvalidArgument("runtime", "host store", "holds the family's shapes only, no weights to compute with", "serve it on a simulated device");
  if (c.simulated && c.miss.starts_with("prefetch"))
    throw UnsupportedError("simulated device", "miss '" + c.miss + "'",
                           "is not simulated: the routing model draws each layer's experts apart, so there is no next-layer choice to "
                           "predict from this layer's",
                           "simulate lru, or run prefetch on the virtual or the real clock");
  if (c.whole_model_swaps && !c.pinned_if_room.empty())
    throw InvalidArgument("runtime", "time-sharing", "reloads every pinned slot per swap, so it cannot pin while room",
                          "pin every position outright, or serve without time-sharing");
  if (c.virtual_experts) {
    const VirtualConfig& v = *c.virtual_experts;
    if (c.miss != "masked")
      throw InvalidArgument("runtime", "virtual experts", "gate over the resident experts only, never loading a miss",
                            "use the masked miss policy");
    if (c.whole_model_swaps) bad("virtual experts", "cannot be combined with time-sharing");
    check_virtual_config(v, s);
    if (!c.pinned_if_room.empty()) bad("virtual experts", "cannot pin while room: every pinned slot is a virtual expert that updates may swap");
  }
  if (c.whole_model_swaps && static_cast<std::int64_t>(c.pinned.size()) != moe_positions(s))
    throw InvalidArgument("runtime", "time-sharing", "needs every expert position pinned",
                          "use a layout that makes every position resident");
}

// What the backend allocates for `plan`: a change is served in place only where this stays the same.
BackendShape backend_shape(const ModelSpec& s, const DevicePlan& plan, const RuntimeConfig& c) {
  BackendShape shape;
  shape.scratch_slots = plan.scratch;
  shape.buffers = plan.sets;
  shape.kv_block_tokens = c.kv_block_tokens;
  shape.cpu_weights = c.cpu_weights;
  shape.cuda = with_environment(c.cuda);
  const std::uint64_t block_bytes = static_cast<std::uint64_t>(s.num_layers * s.kv_cache_width() * c.kv_block_tokens) *
                                    static_cast<std::uint64_t>(c.reserve.kv_bytes);
  if (c.budget_bytes) shape.kv_blocks = block_bytes ? static_cast<std::int64_t>(plan.kv_bytes / block_bytes) : 0;
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    shape.layer_slots.push_back(s.is_sparse(l) ? plan.layer_pinned[i] + plan.layer_deltas[i] + plan.spare : 0);
    shape.layer_delta_only.emplace_back(plan.layer_pinned[i], plan.layer_deltas[i]);
  }
  return shape;
}

// Whether what the backend holds (`held`) serves a plan that needs `next`: the same buffers, miss
// slots, KV blocks and spare slots a layer, and no more pinned or delta-only slots a layer than it
// has (those a smaller layout leaves over stay allocated, empty).
bool holds(const BackendShape& held, const BackendShape& next) {
  if (next.scratch_slots != held.scratch_slots || next.buffers != held.buffers || next.kv_block_tokens != held.kv_block_tokens ||
      next.kv_blocks != held.kv_blocks || next.cpu_weights != held.cpu_weights ||
      next.layer_slots.size() != held.layer_slots.size())
    return false;
  for (std::size_t l = 0; l < held.layer_slots.size(); ++l) {
    const auto [pinned, deltas] = next.layer_delta_only[l];
    const auto [held_pinned, held_deltas] = held.layer_delta_only[l];
    if (pinned > held_pinned || deltas > held_deltas || next.layer_slots[l] - pinned - deltas != held.layer_slots[l] - held_pinned - held_deltas)
      return false;
  }
  return true;
}

}  // namespace

std::vector<PinnedExpert> every_position(const ModelSpec& s, int target) {
  std::vector<PinnedExpert> out;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l); ++e) out.push_back({l, e, target});
  return out;
}

std::vector<PinnedExpert> deltas_layer_major(const HostStore& store, const std::vector<int>& targets) {
  const ModelSpec& s = store.spec();
  std::vector<PinnedExpert> out;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l); ++e)
      for (int t : targets)
        if (store.source(t, l, e).kind == ExpertSource::Kind::Delta) out.push_back({l, e, t});
  return out;
}

Runtime::Runtime(const HostStore& store, RuntimeConfig config)
    : store_(&store),
      config_(std::move(config)),
      budget_(config_.budget_bytes.value_or(DeviceBudget::kUnlimited)),
      reconfigurer_(1),
      kv_(1, 0),
      recent_(store.targets(), store.distinct_experts()),
      gate_(store.spec().num_layers) {
  check_config(store, config_);
  const ModelSpec& s = store.spec();
  policy_ = make_miss_policy(config_.miss);
  if (!policy_)
    throw InvalidArgument("runtime", "miss policy '" + config_.miss + "'", "is not a miss policy", "use " + miss_policy_choices());
  DevicePlan plan = plan_device(store, config_, *policy_);
  budget_ = plan.budget;
  items_ = std::move(plan.items);
  config_.pinned = std::move(plan.pinned);
  delta_only_ = std::move(plan.delta_only);
  const std::vector<std::int64_t>& pinned = plan.layer_pinned;
  const std::vector<std::int64_t>& deltas = plan.layer_deltas;
  const std::int64_t spare = plan.spare, scratch = plan.scratch;
  const int sets = plan.sets;
  reconfigurer_ = Reconfigurer(sets);
  ahead_.assign(static_cast<std::size_t>(sets), {});
  shape_ = backend_shape(s, plan, config_);
  kv_ = KvBlockPool(config_.kv_block_tokens, shape_.kv_blocks);
  pools_.resize(static_cast<std::size_t>(s.num_layers));
  tables_.resize(static_cast<std::size_t>(s.num_layers));
  moe_.tables.assign(static_cast<std::size_t>(s.num_layers), nullptr);
  moe_.pools.assign(static_cast<std::size_t>(s.num_layers), nullptr);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    if (!s.is_sparse(l)) continue;
    pools_[i] = std::make_unique<SlotPool>(pinned[i] + deltas[i], spare, 0);
    tables_[i] = std::make_unique<RerouteTable>(store.targets(), s.num_experts);
    moe_.tables[i] = tables_[i].get();
    moe_.pools[i] = pools_[i].get();
  }
  scratch_ = std::make_unique<SlotPool>(0, 0, scratch);
  moe_.scratch = scratch_.get();
  moe_.store = store_;
  moe_.policy = policy_.get();
  moe_.recent = &recent_;
  moe_.gate = policy_->gates_prefetch() ? &gate_ : nullptr;
  // Loading's LibTorch and OpenMP work on a thread of its own, so that its OpenMP team does not
  // outlive it beside the engine thread's (threads.h). The CUDA backend loads where it is made: its
  // handles and streams were only ever tried on the constructing thread.
  const auto load = [&] {
    backend_ = config_.simulated                ? make_sim_backend(store, shape_, *config_.simulated, config_.copy_slowdown, config_.compute_slowdown)
               : config_.device == Device::Cuda ? make_cuda_backend(store, shape_)
                                                : make_cpu_backend(store, shape_);

    // The pinned experts: dense ones first, so that a delta-only slot's base is in place when it loads.
    std::vector<std::int32_t> next(static_cast<std::size_t>(s.num_layers), 0);
    pin_slot_.assign(config_.pinned.size(), -1);
    auto pin = [&](std::size_t k) {
      const PinnedExpert& p = config_.pinned[k];
      const auto i = static_cast<std::size_t>(p.layer);
      const std::int32_t slot = pin_slot_[k] = next[i]++;
      const ExpertId content = store.expert(p.target, p.layer, p.expert);
      backend_->load_expert(p.layer, {false, slot}, content);
      pools_[i]->fill(slot, store.source(p.target, p.layer, p.expert), content);
    };
    for (std::size_t k = 0; k < config_.pinned.size(); ++k)
      if (!delta_only_[k]) pin(k);
    for (std::size_t k = 0; k < config_.pinned.size(); ++k)
      if (delta_only_[k]) pin(k);
  };
  if (config_.device == Device::Cuda)
    load();
  else
    on_passing_thread(load);
  if (config_.virtual_experts) {
    for (std::int64_t d : deltas)
      if (d > 0)
        throw InvalidArgument("runtime", "virtual experts", "swap whole experts, and a packed delta's base may be swapped out",
                              "serve delta folders with the delta or hybrid strategy");
  }
  index_pins();
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (tables_[static_cast<std::size_t>(l)]) route_layer(l);
  if (config_.virtual_experts) {
    virtual_ = std::make_unique<VirtualExperts>(*config_.virtual_experts, store, config_.hit, *backend_, moe_.pools, moe_.tables);
    moe_.importance = &virtual_->importance();
  }
}

void Runtime::index_pins() {
  pins_of_layer_.assign(static_cast<std::size_t>(store_->spec().num_layers), {});
  for (std::size_t k = 0; k < config_.pinned.size(); ++k) pins_of_layer_[static_cast<std::size_t>(config_.pinned[k].layer)].push_back(k);
}

void Runtime::route_layer(std::int64_t layer) {
  const auto i = static_cast<std::size_t>(layer);
  RerouteTable& table = *tables_[i];
  const SlotPool& pool = *pools_[i];
  table = RerouteTable(store_->targets(), store_->spec().num_experts);
  auto serve = [&](std::int32_t slot, std::int64_t e, ExpertId content, bool exact) {
    for (int r = 0; r < store_->targets(); ++r)
      if (table.at(r, e) == RerouteTable::kMiss && (exact ? store_->expert(r, layer, e) == content : config_.hit == HitPolicy::Consolidated))
        table.set(r, e, slot);
  };
  for (const bool exact : {true, false})
    for (std::size_t k : pins_of_layer_[i]) {
      const PinnedExpert& p = config_.pinned[k];
      if (pin_slot_[k] >= 0) serve(pin_slot_[k], p.expert, store_->expert(p.target, p.layer, p.expert), exact);
    }
  for (std::int64_t slot = pool.count(SlotPool::Role::Pinned); slot < pool.size(); ++slot)
    if (pool.content(slot) >= 0) serve(static_cast<std::int32_t>(slot), pool.source(slot).expert, pool.content(slot), true);
}

std::shared_ptr<const HostStore> Runtime::shared_store() const {
  std::lock_guard lock(store_m_);
  if (next_store_) return next_store_;
  return std::shared_ptr<const HostStore>(std::shared_ptr<const HostStore>(), store_);  // the owner's, for the runtime's life
}

std::optional<RuntimeConfig> Runtime::in_place(const HostStore& next, RuntimeConfig config, std::string& why_not) const {
  if (!backend_->rebases()) {
    why_not = "the " + std::string(device_name(config_.device)) + " backend rebuilds its runtime for a change";
    return std::nullopt;
  }
  if (virtual_ || config.virtual_experts || config_.whole_model_swaps || config.whole_model_swaps) {
    why_not = "virtual experts and time-sharing rebuild their runtime for a change";
    return std::nullopt;
  }
  if (config.miss != config_.miss || config.device != config_.device || config.kv_block_tokens != config_.kv_block_tokens ||
      config.budget_bytes != config_.budget_bytes) {
    why_not = "the next family is served with another miss policy, device or budget";
    return std::nullopt;
  }
  if (reads_in_place() && next.tier().budget()) {  // as a new CPU backend would refuse it
    why_not = "weights read in place (--cpu-weights mapped) cannot be served under a host budget, which pages the files out";
    return std::nullopt;
  }
  config.resident_sets = reconfigurer_.buffers();  // K stays: its buffers hold the running requests' sets
  try {
    check_config(next, config);
    if (holds(shape_, backend_shape(next.spec(), plan_device(next, config, *policy_), config))) return config;
    why_not = "the next family's layout needs more slots per layer, or other spare slots, miss slots or KV blocks, than the runtime holds";
  } catch (const std::exception& e) {
    why_not = e.what();
  }
  return std::nullopt;
}

std::vector<std::int64_t> Runtime::pinned_slots() const {
  std::vector<std::int64_t> out;
  for (const auto& [dense, delta_only] : shape_.layer_delta_only) out.push_back(dense);
  return out;
}

RebaseResult Runtime::rebase(std::shared_ptr<const HostStore> next, RuntimeConfig config) {
  if (!next) throw InvalidArgument("runtime", "next store", "is missing");
  // The fills ahead finish first: the buffers then hold what the reconfigurer says they hold.
  for (std::size_t b = 0; b < ahead_.size(); ++b) {
    if (ahead_[b].set < 0) continue;
    ahead_[b] = {};
    try {
      backend_->wait_set(static_cast<int>(b));
    } catch (...) {
      reconfigurer_.forget(static_cast<int>(b));
    }
  }
  const StoreMap map = map_store(*store_, *next);
  DevicePlan plan = plan_device(*next, config, *policy_);
  const ModelSpec& s = next->spec();
  if (!holds(shape_, backend_shape(s, plan, config)) || virtual_ || config.whole_model_swaps)
    throw std::logic_error("Runtime::rebase with a config in_place() did not return");

  // What every slot and buffer holds, under the next store's ids.
  backend_->rebase(*next, map);
  reconfigurer_.renumber(map.set);
  auto source_of = [&](std::int64_t layer, std::int64_t e, ExpertId content) {
    for (int t = 0; t < next->targets(); ++t)
      if (next->expert(t, layer, e) == content) return next->source(t, layer, e);
    return ExpertSource{};
  };
  for (std::int64_t slot = 0; slot < scratch_->size(); ++slot) scratch_->clear(slot);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    SlotPool* pool = pools_[static_cast<std::size_t>(l)].get();
    if (!pool) continue;
    for (std::int64_t slot = 0; slot < pool->size(); ++slot) {
      const ExpertId content = map.expert_of(pool->content(slot));
      const ExpertSource source = content >= 0 ? source_of(l, pool->source(slot).expert, content) : ExpertSource{};
      if (source.empty()) pool->clear(slot);
      else pool->renumber(slot, source, content);
    }
  }
  {
    std::lock_guard lock(store_m_);
    next_store_ = next;
  }
  store_ = next.get();
  moe_.store = store_;
  config_ = std::move(config);
  config_.pinned = std::move(plan.pinned);
  delta_only_ = std::move(plan.delta_only);
  budget_ = plan.budget;
  items_ = std::move(plan.items);
  recent_ = RecentExperts(next->targets(), next->distinct_experts());
  index_pins();

  // Pins the next layout keeps stay where they are; the rest take the slots their range frees.
  RebaseResult result;
  pin_slot_.assign(config_.pinned.size(), -1);
  queued_pins_.clear();
  std::vector<QueuedPin> delta_copies;
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    if (!pools_[i]) continue;
    SlotPool& pool = *pools_[i];
    const auto [dense_slots, delta_slots] = shape_.layer_delta_only[i];
    std::vector<char> claimed(static_cast<std::size_t>(pool.size()), 0);
    auto holds = [&](std::int64_t slot, const PinnedExpert& p) {
      return pool.content(slot) == next->expert(p.target, l, p.expert) && pool.source(slot).expert == p.expert;
    };
    for (const bool delta : {false, true}) {
      const std::int64_t first = delta ? dense_slots : 0, end = delta ? dense_slots + delta_slots : dense_slots;
      std::vector<std::size_t> moved;
      for (std::size_t k : pins_of_layer_[i]) {
        if (static_cast<bool>(delta_only_[k]) != delta) continue;
        const PinnedExpert& p = config_.pinned[k];
        bool kept = false;
        for (std::int64_t slot = first; slot < end && !kept; ++slot) {
          if (claimed[static_cast<std::size_t>(slot)] || !holds(slot, p)) continue;
          // A delta-only slot reads its base's matrices where they were when it loaded: kept only
          // while that base stays in its slot.
          if (delta) {
            const ExpertId base = next->expert_tensors(pool.content(slot)).dense;
            bool base_kept = false;
            for (std::int64_t d = 0; d < dense_slots && !base_kept; ++d) base_kept = claimed[static_cast<std::size_t>(d)] && pool.content(d) == base;
            if (!base_kept) continue;
          }
          claimed[static_cast<std::size_t>(slot)] = 1;
          pin_slot_[k] = static_cast<std::int32_t>(slot);
          pool.renumber(slot, next->source(p.target, l, p.expert), pool.content(slot));
          kept = true;
          ++result.kept;
        }
        if (!kept) moved.push_back(k);
      }
      std::int64_t free = first;
      for (std::size_t k : moved) {
        while (claimed[static_cast<std::size_t>(free)]) ++free;
        claimed[static_cast<std::size_t>(free)] = 1;
        pool.clear(free);
        const QueuedPin q{k, static_cast<std::int32_t>(free)};
        if (delta) delta_copies.push_back(q);
        else queued_pins_.push_back(q);
        ++result.copies;
        // Read in place, a dense expert's "copy" is a view of the file (a dtype the kernels do not
        // read, f16, is still copied: not counted here); a packed delta is copied either way.
        if (delta || !reads_in_place()) result.copy_bytes += pin_bytes(*next, config_.pinned[k], delta);
      }
      for (std::int64_t slot = first; slot < end; ++slot)
        if (!claimed[static_cast<std::size_t>(slot)]) pool.clear(slot);
    }
    route_layer(l);  // the table anew, sized for the next store's targets
  }
  queued_pins_.insert(queued_pins_.end(), delta_copies.begin(), delta_copies.end());
  repins_.pending = static_cast<std::int64_t>(queued_pins_.size());
  return result;
}

void Runtime::repin(std::optional<double> seconds) {
  if (queued_pins_.empty()) return;
  const DeviceTimer timer(*backend_);
  std::vector<char> changed(pools_.size(), 0);
  do {
    const QueuedPin q = queued_pins_.front();
    queued_pins_.pop_front();
    const PinnedExpert& p = config_.pinned[q.pin];
    const ExpertId content = store_->expert(p.target, p.layer, p.expert);
    repins_.bytes += backend_->load_expert(p.layer, {false, q.slot}, content).bytes;
    pools_[static_cast<std::size_t>(p.layer)]->fill(q.slot, store_->source(p.target, p.layer, p.expert), content);
    pin_slot_[q.pin] = q.slot;
    changed[static_cast<std::size_t>(p.layer)] = 1;
    ++repins_.copies;
  } while (!queued_pins_.empty() && (!seconds || timer.seconds() < *seconds));
  for (std::size_t l = 0; l < changed.size(); ++l)
    if (changed[l]) route_layer(static_cast<std::int64_t>(l));
  repins_.pending = static_cast<std::int64_t>(queued_pins_.size());
  repins_.seconds += timer.seconds();
}

Runtime::~Runtime() = default;  // virtual_ goes first, joining its copy thread before the backend goes

std::uint64_t Runtime::weight_bytes() const {
  std::uint64_t bytes = 0;
  for (const DeviceItem& item : items_)
    for (const char* held : {"non-expert weights", "expert slots", "delta-only slots", "pinned while room", "staging slots"})
      if (item.name.starts_with(held)) bytes += item.bytes;
  return bytes;
}

int Runtime::target_of(const std::string& name) const {
  for (const auto& [alias, t] : config_.aliases)
    if (alias == name) return t;
  return store_->index(name);
}

int Runtime::set_of(int target) const {
  if (config_.whole_model_swaps) return target;
  const int owner = config_.non_expert_of.empty() ? target : config_.non_expert_of[static_cast<std::size_t>(target)];
  return store_->set_of(owner);
}

void Runtime::load_pinned(int target, std::uint64_t& bytes) {
  const ModelSpec& s = store_->spec();
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    if (!pools_[static_cast<std::size_t>(l)]) continue;
    SlotPool& pool = *pools_[static_cast<std::size_t>(l)];
    RerouteTable& table = *tables_[static_cast<std::size_t>(l)];
    for (std::int64_t slot = 0; slot < pool.count(SlotPool::Role::Pinned); ++slot) {
      const std::int64_t e = pool.source(slot).expert;
      const ExpertId content = store_->expert(target, l, e);
      if (pool.content(slot) != content) {
        bytes += backend_->load_expert(l, {false, static_cast<std::int32_t>(slot)}, content).bytes;
        pool.fill(slot, store_->source(target, l, e), content);
      }
      for (int r = 0; r < store_->targets(); ++r)
        table.set(r, e, store_->expert(r, l, e) == content ? static_cast<std::int32_t>(slot) : RerouteTable::kMiss);
    }
  }
}

std::vector<SwapRecord> Runtime::make_resident(std::span<const int> sets) {
  std::vector<SwapRecord> out;
  const std::vector<std::pair<int, int>> fills = reconfigurer_.ensure(sets);
  // Sets filled ahead: the step waits for what is left of their fill, and is charged that.
  for (int set : sets) {
    const int buffer = reconfigurer_.buffer_of(set);
    AheadFill& a = ahead_[static_cast<std::size_t>(buffer)];
    if (a.set != set) continue;
    const DeviceTimer timer(*backend_);
    const AheadFill done = std::exchange(a, {});
    try {
      backend_->wait_set(buffer);
    } catch (...) {
      reconfigurer_.forget(buffer);
      throw;
    }
    out.push_back({set, done.bytes, done.issue_seconds + timer.seconds(), 0, true});
  }
  for (const auto& [buffer, set] : fills) {
    ahead_[static_cast<std::size_t>(buffer)] = {};  // a fill ahead nobody claimed: load_set waits for it, then overwrites
    const DeviceTimer timer(*backend_);
    SwapRecord r{set, 0, 0};
    try {
      r.bytes = backend_->load_set(buffer, config_.whole_model_swaps ? store_->set_of(set) : set);
      if (config_.whole_model_swaps) load_pinned(set, r.bytes);
    } catch (...) {
      reconfigurer_.forget(buffer);
      throw;
    }
    const double wall = timer.seconds();
    r.seconds = priced() ? wall : wall * config_.copy_slowdown;  // a simulated device prices its slice's link itself
    r.throttle_seconds = r.seconds - wall;
    out.push_back(r);
  }
  return out;
}

void Runtime::load_ahead(std::span<const int> upcoming) {
  if (!fills_ahead()) return;
  for (std::size_t i = 0; i < upcoming.size(); ++i) {
    const int set = upcoming[i];
    if (reconfigurer_.buffer_of(set) >= 0) continue;
    const int buffer = reconfigurer_.ahead(set, upcoming.first(i));  // never over one wanted sooner
    if (buffer < 0) break;  // the step and the sets wanted sooner hold every buffer
    try {
      const DeviceTimer timer(*backend_);
      const std::uint64_t bytes = backend_->start_set(buffer, set);
      ahead_[static_cast<std::size_t>(buffer)] = {set, bytes, timer.seconds()};
    } catch (...) {
      reconfigurer_.forget(buffer);
      throw;
    }
  }
}

void Runtime::read_ahead(std::span<const int> running_targets, std::span<const int> waiting_targets) const {
  if (!store_->tier().budget()) return;
  std::vector<std::size_t> ids;
  auto add = [&](TensorId t) { ids.push_back(static_cast<std::size_t>(t)); };
  // The store's non-expert set a target's requests read (whole-model swaps number sets by target).
  auto set_tensors = [&](int target) -> const std::vector<TensorId>& {
    return store_->set_tensors(store_->set_of(config_.non_expert_of.empty() ? target : config_.non_expert_of[static_cast<std::size_t>(target)]));
  };
  for (int target : running_targets)
    for (TensorId t : set_tensors(target)) add(t);
  // A request routes each token to top_k experts a layer: a few tokens' worth of its target's
  // recent misses is what the tier can usefully hold ahead without pushing out what runs.
  const std::size_t most = static_cast<std::size_t>(store_->spec().num_sparse_layers() * store_->spec().top_k) * 4;
  for (int target : waiting_targets) {
    for (TensorId t : set_tensors(target)) add(t);
    for (ExpertId e : recent_.latest(target, most)) {
      const HostExpert& x = store_->expert_tensors(e);
      for (TensorId t : {x.gate, x.up, x.down}) add(t);
    }
  }
  store_->tier().read_ahead(ids);
}

std::vector<int> Runtime::loading_sets() const {
  std::vector<int> out;
  for (std::size_t b = 0; b < ahead_.size(); ++b)
    if (ahead_[b].set >= 0 && !backend_->set_ready(static_cast<int>(b))) out.push_back(ahead_[b].set);
  return out;
}

namespace {

// The rows `result` returned whole that `batch` draws from, as their candidates instead.
void prepare_on_host(const StepBatch& batch, StepResult& result, int count) {
  for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    const StepChunk& c = batch.chunks[ci];
    Logits& whole = result.logits[ci];
    if (c.emit != Emit::Last || !c.draw_temperature || whole.rows != 1) continue;
    result.candidates.resize(batch.chunks.size());
    result.candidates[ci] = prepare_candidates(whole.row(0), *c.draw_temperature, count);
    whole = {};
  }
}

// Logits no backend should hand back: a chunk whose row holds NaN or infinity fails (the CPU backend
// has already named the layer where its values stopped being finite; this catches the output head,
// and every backend).
void fail_non_finite_logits(const StepBatch& batch, StepResult& result) {
  const char* why = "the output head computed logits that are not finite (the weights' products overflow: check the checkpoint's weights)";
  for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    if (result.failure(ci)) continue;
    const std::vector<float>& v = result.logits[ci].values;
    const bool rows_bad = !std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
    const bool prepared_bad = ci < result.candidates.size() && result.candidates[ci].vocab > 0 &&
                              (!std::isfinite(result.candidates[ci].max_logit) || !std::isfinite(result.candidates[ci].normaliser));
    if (rows_bad || prepared_bad) result.fail(batch.chunks.size(), ci, why);
  }
}

}  // namespace

StepResult Runtime::run(const StepBatch& batch) {
  if (virtual_) virtual_->before_step();
  // A change's copies, for no longer than a step takes: no running request waits more than that.
  if (!queued_pins_.empty()) repin(last_step_seconds_);
  const DeviceTimer timer(*backend_);
  StepResult r = backend_->run(batch, moe_);
  const double wall = last_step_seconds_ = timer.seconds();
  fail_non_finite_logits(batch, r);
  if (config_.host_candidates > 0) prepare_on_host(batch, r, config_.host_candidates);
  if (virtual_) virtual_->after_step();
  if (!priced()) charge_slowdowns(r, wall);  // a simulated device priced its slice's compute and link itself
  if (moe_.gate) judge_prefetches(r);
  return r;
}

void Runtime::charge_slowdowns(StepResult& r, double wall) const {
  if (config_.compute_slowdown > 1.0) {
    // A MIG slice computes at 1/N of the device: the step's work beyond its copies (which the copy
    // slowdown prices) takes N times as long.
    double loads = 0;
    for (const auto& seq : r.counts)
      for (const LayerCounts& c : seq) loads += c.load_seconds + c.prefetch_seconds;
    r.throttle_seconds += std::max(0.0, wall - loads) * (config_.compute_slowdown - 1.0);
  }
  if (config_.compute_slowdown > 1.0 || config_.copy_slowdown > 1.0)
    for (auto& seq : r.counts)
      for (LayerCounts& c : seq)
        for (LayerTime& t : c.alone)  // this step's one token: the layer's loads are its expert block's
          if (t.steps > 0) {
            t.attention_seconds *= config_.compute_slowdown;
            const double copies = c.load_seconds + c.prefetch_seconds;
            t.expert_seconds = std::max(0.0, t.expert_seconds - copies) * config_.compute_slowdown + copies * config_.copy_slowdown;
          }
  if (config_.copy_slowdown > 1.0)
    for (auto& seq : r.counts)
      for (LayerCounts& c : seq) {
        r.throttle_seconds += (c.load_seconds + c.prefetch_seconds) * (config_.copy_slowdown - 1.0);
        c.load_seconds *= config_.copy_slowdown;
        c.prefetch_seconds *= config_.copy_slowdown;
      }
}

void Runtime::judge_prefetches(const StepResult& r) {
  for (std::size_t l = 0; l < moe_.pools.size(); ++l) {
    PrefetchOutcome o;
    for (const auto& seq : r.counts) {
      if (l >= seq.size()) continue;
      const LayerCounts& c = seq[l];
      o.prefetches += c.prefetches;
      o.used += c.prefetch_used;
      o.loads += c.loads;
      o.prefetch_seconds += c.prefetch_seconds;
      o.load_seconds += c.load_seconds;
    }
    moe_.gate->observe(static_cast<std::int64_t>(l), o);
  }
}

}  // namespace mosaic
