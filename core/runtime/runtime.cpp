#include "runtime/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "common/byte_size.h"
#include "common/error.h"
#include "runtime/device_plan.h"
#include "common/stopwatch.h"

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
  if (const auto memory = device_memory_bytes(c.device); memory && c.budget_bytes && *c.budget_bytes > *memory) {
    const std::string what = c.device == Device::Cpu ? "this machine's memory" : "the GPU's memory";
    throw InvalidArgument("runtime", "budget", format_bytes(*c.budget_bytes) + " is more than " + what + " (" + format_bytes(*memory) +
                                                   "), so it would bound nothing",
                          "give a budget of at most " + format_bytes(*memory) + ", or none");
  }
  if (c.whole_model_swaps && !c.pinned_if_room.empty())
    throw InvalidArgument("runtime", "time-sharing", "reloads every pinned slot per swap, so it cannot pin while room",
                          "pin every position outright, or serve without time-sharing");
  if (c.virtual_experts) {
    const VirtualConfig& v = *c.virtual_experts;
    if (c.miss != "masked")
      throw InvalidArgument("runtime", "virtual experts", "gate over the resident experts only, never loading a miss",
                            "use the masked miss policy");
    if (c.whole_model_swaps) bad("virtual experts", "cannot be combined with time-sharing");
    if (c.device == Device::Cuda)
      throw InvalidArgument("runtime", "virtual experts", "run on the CPU backend only: the CUDA backend does not measure importance yet",
                            "serve them with --device cpu");
    check_virtual_config(v, s);
    if (!c.pinned_if_room.empty()) bad("virtual experts", "cannot pin while room: every pinned slot is a virtual expert that updates may swap");
  }
  if (c.whole_model_swaps && static_cast<std::int64_t>(c.pinned.size()) != moe_positions(s))
    throw InvalidArgument("runtime", "time-sharing", "needs every expert position pinned",
                          "use a layout that makes every position resident");
}

}  // namespace

std::vector<PinnedExpert> pinned_from_layout(const Layout& layout, const std::vector<int>& to_store) {
  const ConsolidationPlan& plan = layout.plan;
  if (to_store.size() != layout.variants.size())
    throw MismatchError("layout", "variants", "the layout names " + std::to_string(layout.variants.size()) +
                                                  " variants but " + std::to_string(to_store.size()) + " were matched",
                        "match the layout to the family first");
  std::vector<PinnedExpert> out;
  for (std::int64_t l = 0; l < plan.layers; ++l)
    for (std::int64_t e = 0; e < plan.experts; ++e)
      if (const int v = plan.resident(l, e); v >= 0) out.push_back({l, e, to_store[static_cast<std::size_t>(v)]});
  return out;
}

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
    : store_(store),
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
  const std::uint64_t block_bytes = static_cast<std::uint64_t>(s.num_layers * s.kv_cache_width() * config_.kv_block_tokens) *
                                    static_cast<std::uint64_t>(config_.reserve.kv_bytes);
  std::optional<std::int64_t> blocks;
  if (config_.budget_bytes) blocks = block_bytes ? static_cast<std::int64_t>(plan.kv_bytes / block_bytes) : 0;
  kv_ = KvBlockPool(config_.kv_block_tokens, blocks);

  BackendShape shape;
  shape.scratch_slots = scratch;
  shape.buffers = sets;
  shape.kv_block_tokens = config_.kv_block_tokens;
  shape.kv_blocks = blocks;
  pools_.resize(static_cast<std::size_t>(s.num_layers));
  tables_.resize(static_cast<std::size_t>(s.num_layers));
  moe_.tables.assign(static_cast<std::size_t>(s.num_layers), nullptr);
  moe_.pools.assign(static_cast<std::size_t>(s.num_layers), nullptr);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const auto i = static_cast<std::size_t>(l);
    shape.layer_slots.push_back(s.is_sparse(l) ? pinned[i] + deltas[i] + spare : 0);
    shape.layer_delta_only.emplace_back(pinned[i], deltas[i]);
    if (!s.is_sparse(l)) continue;
    pools_[i] = std::make_unique<SlotPool>(pinned[i] + deltas[i], spare, 0);
    tables_[i] = std::make_unique<RerouteTable>(store.targets(), s.num_experts);
    moe_.tables[i] = tables_[i].get();
    moe_.pools[i] = pools_[i].get();
  }
  scratch_ = std::make_unique<SlotPool>(0, 0, scratch);
  moe_.scratch = scratch_.get();
  moe_.store = &store_;
  moe_.policy = policy_.get();
  moe_.recent = &recent_;
  moe_.gate = policy_->gates_prefetch() ? &gate_ : nullptr;
  backend_ = config_.device == Device::Cuda ? make_cuda_backend(store, shape) : make_cpu_backend(store, shape);

  // The pinned experts: dense ones first, so that a delta-only slot's base is in place when it loads.
  std::vector<std::int32_t> next(static_cast<std::size_t>(s.num_layers), 0);
  std::vector<std::int32_t> slot_of(config_.pinned.size());
  auto pin = [&](std::size_t k) {
    const PinnedExpert& p = config_.pinned[k];
    const auto i = static_cast<std::size_t>(p.layer);
    const std::int32_t slot = slot_of[k] = next[i]++;
    const ExpertId content = store.expert(p.target, p.layer, p.expert);
    backend_->load_expert(p.layer, {false, slot}, content);
    pools_[i]->fill(slot, store.source(p.target, p.layer, p.expert), content);
  };
  for (std::size_t k = 0; k < config_.pinned.size(); ++k)
    if (!delta_only_[k]) pin(k);
  for (std::size_t k = 0; k < config_.pinned.size(); ++k)
    if (delta_only_[k]) pin(k);
  if (config_.virtual_experts) {
    for (std::int64_t d : deltas)
      if (d > 0)
        throw InvalidArgument("runtime", "virtual experts", "swap whole experts, and a packed delta's base may be swapped out",
                              "serve delta folders with the delta or hybrid strategy");
  }
  // The rows each serves: a row's own expert wherever it is pinned; under consolidated hits, rows
  // without theirs take the position's first pinned copy.
  for (int exact = 1; exact >= 0; --exact)
    for (std::size_t k = 0; k < config_.pinned.size(); ++k) {
      const PinnedExpert& p = config_.pinned[k];
      RerouteTable& table = *tables_[static_cast<std::size_t>(p.layer)];
      const ExpertId content = store.expert(p.target, p.layer, p.expert);
      for (int r = 0; r < store.targets(); ++r)
        if (table.at(r, p.expert) == RerouteTable::kMiss &&
            (exact ? store.expert(r, p.layer, p.expert) == content : config_.hit == HitPolicy::Consolidated))
          table.set(r, p.expert, slot_of[k]);
    }
  if (config_.virtual_experts) {
    virtual_ = std::make_unique<VirtualExperts>(*config_.virtual_experts, store, config_.hit, *backend_, moe_.pools, moe_.tables);
    moe_.importance = &virtual_->importance();
  }
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
  return store_.index(name);
}

int Runtime::set_of(int target) const {
  if (config_.whole_model_swaps) return target;
  const int owner = config_.non_expert_of.empty() ? target : config_.non_expert_of[static_cast<std::size_t>(target)];
  return store_.set_of(owner);
}

void Runtime::load_pinned(int target, std::uint64_t& bytes) {
  const ModelSpec& s = store_.spec();
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    if (!pools_[static_cast<std::size_t>(l)]) continue;
    SlotPool& pool = *pools_[static_cast<std::size_t>(l)];
    RerouteTable& table = *tables_[static_cast<std::size_t>(l)];
    for (std::int64_t slot = 0; slot < pool.count(SlotPool::Role::Pinned); ++slot) {
      const std::int64_t e = pool.source(slot).expert;
      const ExpertId content = store_.expert(target, l, e);
      if (pool.content(slot) != content) {
        bytes += backend_->load_expert(l, {false, static_cast<std::int32_t>(slot)}, content).bytes;
        pool.fill(slot, store_.source(target, l, e), content);
      }
      for (int r = 0; r < store_.targets(); ++r)
        table.set(r, e, store_.expert(r, l, e) == content ? static_cast<std::int32_t>(slot) : RerouteTable::kMiss);
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
    const auto t0 = std::chrono::steady_clock::now();
    const AheadFill done = std::exchange(a, {});
    try {
      backend_->wait_set(buffer);
    } catch (...) {
      reconfigurer_.forget(buffer);
      throw;
    }
    out.push_back({set, done.bytes, done.issue_seconds + seconds_since(t0), 0, true});
  }
  for (const auto& [buffer, set] : fills) {
    ahead_[static_cast<std::size_t>(buffer)] = {};  // a fill ahead nobody claimed: load_set waits for it, then overwrites
    const auto t0 = std::chrono::steady_clock::now();
    SwapRecord r{set, 0, 0};
    try {
      r.bytes = backend_->load_set(buffer, config_.whole_model_swaps ? store_.set_of(set) : set);
      if (config_.whole_model_swaps) load_pinned(set, r.bytes);
    } catch (...) {
      reconfigurer_.forget(buffer);
      throw;
    }
    const double wall = seconds_since(t0);
    r.seconds = wall * config_.copy_slowdown;
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
      const auto t0 = std::chrono::steady_clock::now();
      const std::uint64_t bytes = backend_->start_set(buffer, set);
      ahead_[static_cast<std::size_t>(buffer)] = {set, bytes, seconds_since(t0)};
    } catch (...) {
      reconfigurer_.forget(buffer);
      throw;
    }
  }
}

void Runtime::read_ahead(std::span<const int> running_targets, std::span<const int> waiting_targets) const {
  if (!store_.tier().budget()) return;
  std::vector<std::size_t> ids;
  auto add = [&](TensorId t) { ids.push_back(static_cast<std::size_t>(t)); };
  // The store's non-expert set a target's requests read (whole-model swaps number sets by target).
  auto set_tensors = [&](int target) -> const std::vector<TensorId>& {
    return store_.set_tensors(store_.set_of(config_.non_expert_of.empty() ? target : config_.non_expert_of[static_cast<std::size_t>(target)]));
  };
  for (int target : running_targets)
    for (TensorId t : set_tensors(target)) add(t);
  // A request routes each token to top_k experts a layer: a few tokens' worth of its target's
  // recent misses is what the tier can usefully hold ahead without pushing out what runs.
  const std::size_t most = static_cast<std::size_t>(store_.spec().num_sparse_layers() * store_.spec().top_k) * 4;
  for (int target : waiting_targets) {
    for (TensorId t : set_tensors(target)) add(t);
    for (ExpertId e : recent_.latest(target, most)) {
      const HostExpert& x = store_.expert_tensors(e);
      for (TensorId t : {x.gate, x.up, x.down}) add(t);
    }
  }
  store_.tier().read_ahead(ids);
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
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r = backend_->run(batch, moe_);
  const double wall = seconds_since(t0);
  fail_non_finite_logits(batch, r);
  if (config_.host_candidates > 0) prepare_on_host(batch, r, config_.host_candidates);
  if (virtual_) virtual_->after_step();
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
  if (moe_.gate) judge_prefetches(r);
  return r;
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
