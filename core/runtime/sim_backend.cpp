#include "runtime/sim_backend.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "kernels/token_candidates.h"
#include "sim/model_shapes.h"
#include "sim/routing_model.h"
#include "runtime/expert_importance.h"
#include "runtime/moe_waves.h"
#include "sim/step_cost.h"

namespace mosaic {
namespace {

class DrawnRoutes final : public RouteSource {
 public:
  DrawnRoutes(double concentration, std::uint64_t seed, std::int64_t experts, std::int64_t top_k)
      : router_(concentration, seed, experts, top_k) {}
  void route(std::uint64_t request, std::int64_t position, std::int64_t layer, std::span<const int> choices, std::vector<int>& out) override {
    router_.route(request, position, layer, choices, out);
  }

 private:
  SimRouter router_;
};

class SimBackend final : public Backend {
 public:
  SimBackend(const HostStore& store, const BackendShape& shape, const SimulatedDevice& device, double copy_slowdown, double compute_slowdown)
      : store_(&store),
        shape_(shape),
        device_(device),
        shapes_(model_shapes(store.spec(), store.distinct_tensors() > 0 ? dtype_size(store.tensor(0).dtype) : 2)),
        buffers_(static_cast<std::size_t>(shape.buffers), std::vector<TensorId>(store.non_expert_names().size(), -1)),
        copy_slowdown_(copy_slowdown),
        compute_slowdown_(compute_slowdown) {
    const DeviceProfile& p = device.profile;
    if (!device.routes) throw InvalidArgument("simulated device", "routes", "are missing", "give the device a route source");
    for (double rate : {p.h2d_pinned, p.h2d_pageable, p.memory_bandwidth, p.peak_flops})
      if (!(rate > 0))
        throw InvalidArgument("simulated device '" + p.name + "'", "profile", "has a rate that is not positive", "measure it with mosaic-cli bench-device");
  }

  TierRead load_expert(std::int64_t layer, SlotRef slot, ExpertId expert) override {
    const std::uint64_t bytes = expert_bytes(layer, slot, expert);
    device_seconds_ += copy(bytes, device_.host.experts_pinned);
    return {bytes, 0, 0};
  }
  TierRead copy_behind(std::int64_t layer, SlotRef slot, ExpertId expert) override {
    const std::uint64_t bytes = expert_bytes(layer, slot, expert);
    link_.push_back({kExperts, copy(bytes, device_.host.experts_pinned)});
    return {bytes, 0, 0};
  }
  bool copies_landed() override { return !on_link(kExperts); }

  std::uint64_t load_set(int buffer, int set) override {
    wait_set(buffer);  // a fill ahead nobody claimed: this one waits for it, then overwrites it
    const std::uint64_t bytes = fill(buffer, set);
    device_seconds_ += copy(bytes, device_.host.non_expert_pinned);
    return bytes;
  }

  // The host link carries copies behind the steps (fills ahead, virtual experts' updates) one at a
  // time, in the order they began, and only while no step copies: a step's own swaps and loads are
  // its critical path (run() moves the link on by its compute).
  std::uint64_t start_set(int buffer, int set) override {
    wait_set(buffer);
    const std::uint64_t bytes = fill(buffer, set);
    if (bytes > 0) link_.push_back({buffer, copy(bytes, device_.host.non_expert_pinned)});
    return bytes;
  }
  bool set_ready(int buffer) override { return !on_link(buffer); }
  void wait_set(int buffer) override {
    // What is left of its fill, and of the copies ahead of it on the link.
    if (!on_link(buffer)) return;
    while (!link_.empty()) {
      const Transfer t = link_.front();
      link_.pop_front();
      device_seconds_ += t.left;
      if (t.what == buffer) break;
    }
  }

  StepResult run(const StepBatch& batch, MoeState& moe) override;
  std::optional<double> device_seconds() const override { return device_seconds_; }

 private:
  double copy(std::uint64_t bytes, bool pinned) const {
    if (bytes == 0) return 0;  // nothing to copy (the buffer holds the set already): no copy is made
    const DeviceProfile& p = device_.profile;
    return copy_seconds(bytes, pinned ? p.h2d_pinned : p.h2d_pageable, copy_slowdown_, p.copy_setup_seconds);
  }
  std::uint64_t fill(int buffer, int set) {
    std::vector<TensorId>& held = buffers_[static_cast<std::size_t>(buffer)];
    const std::vector<TensorId>& ids = store_->set_tensors(set);
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (held[i] != ids[i]) bytes += store_->tensor(ids[i]).size_bytes();
    held = ids;
    return bytes;
  }
  // A layer's slot groups as the cost model prices them: a dense expert's rows; a delta expert's
  // packed bytes over its rows, its rows added to its base's, whose matrices run once over them all.
  void price_groups(const std::vector<std::pair<ExpertId, std::int64_t>>& groups, std::vector<std::int64_t>& dense,
                    std::vector<StepWork::DeltaRows>& deltas) const {
    std::map<ExpertId, std::size_t> at;  // a dense expert's entry in `dense`
    for (const auto& [content, rows] : groups)
      if (store_->expert_tensors(content).delta < 0) {
        at.emplace(content, dense.size());
        dense.push_back(rows);
      }
    for (const auto& [content, rows] : groups) {
      const HostExpert& x = store_->expert_tensors(content);
      if (x.delta < 0) continue;
      deltas.push_back({rows, store_->delta(x.delta).bytes()});
      const auto [it, added] = at.emplace(x.dense >= 0 ? x.dense : content, dense.size());
      if (added) dense.push_back(0);
      dense[it->second] += rows;
    }
  }
  bool delta_only(std::int64_t layer, SlotRef slot) const {
    if (slot.scratch || static_cast<std::size_t>(layer) >= shape_.layer_delta_only.size()) return false;
    const auto [first, count] = shape_.layer_delta_only[static_cast<std::size_t>(layer)];
    return slot.slot >= first && slot.slot < first + count;
  }
  void link_idle(double seconds) {  // copies behind the steps move on while a step computes
    while (!link_.empty() && link_.front().left <= seconds) {
      seconds -= link_.front().left;
      link_.pop_front();
    }
    if (!link_.empty()) link_.front().left -= seconds;
  }
  bool on_link(int what) const {
    return std::any_of(link_.begin(), link_.end(), [&](const Transfer& t) { return t.what == what; });
  }
  std::uint64_t expert_bytes(std::int64_t layer, SlotRef slot, ExpertId expert) const {
    const HostExpert& x = store_->expert_tensors(expert);
    std::uint64_t bytes = x.delta >= 0 ? store_->delta(x.delta).bytes() : 0;
    if (!delta_only(layer, slot))
      for (TensorId t : {x.gate, x.up, x.down}) bytes += store_->tensor(t).size_bytes();
    return bytes;
  }

  const HostStore* store_;
  BackendShape shape_;
  SimulatedDevice device_;
  ModelShapes shapes_;
  struct Transfer {
    int what;     // the buffer a fill ahead goes to, or kExperts
    double left;  // seconds still to copy
  };
  static constexpr int kExperts = -1;
  std::vector<std::vector<TensorId>> buffers_;  // [buffers]: the set's tensors each holds
  std::deque<Transfer> link_;                   // copies behind the steps, in the order they began
  double copy_slowdown_, compute_slowdown_;
  double device_seconds_ = 0;
};

StepResult SimBackend::run(const StepBatch& batch, MoeState& moe) {
  const ModelSpec& s = store_->spec();
  const std::int64_t k = s.top_k;
  // The runtime refuses prefetch on a simulated device (runtime.cpp's check_config).
  if (moe.policy->prefetches()) throw std::logic_error("a simulated device asked to prefetch");

  const StepLayout layout = lay_out(batch);
  const std::vector<int>& rows = layout.row;
  StepWork work;
  std::vector<int> buffers;
  for (const StepChunk& c : batch.chunks) {
    const auto n = static_cast<std::int64_t>(c.tokens.size());
    work.chunks.push_back({n, c.start + n});
    work.emitted += c.emit == Emit::All ? n : c.emit == Emit::Last ? 1 : 0;
    if (std::find(buffers.begin(), buffers.end(), c.buffer) == buffers.end()) buffers.push_back(c.buffer);
  }
  const std::int64_t T = layout.tokens;
  work.groups = static_cast<std::int64_t>(buffers.size());
  work.expert_rows.resize(static_cast<std::size_t>(s.num_layers));
  work.delta_rows.resize(static_cast<std::size_t>(s.num_layers));
  std::vector<std::pair<ExpertId, std::int64_t>> groups;  // a layer's slot groups: what each holds, its rows

  StepResult r;
  r.counts.assign(static_cast<std::size_t>(batch.sequences), std::vector<LayerCounts>(static_cast<std::size_t>(s.num_layers)));
  r.routes.resize(static_cast<std::size_t>(batch.sequences));
  std::vector<double> layer_loads(static_cast<std::size_t>(s.num_layers), 0.0);
  std::vector<std::int64_t> layer_hits(static_cast<std::size_t>(s.num_layers), 0);
  std::vector<int> all(static_cast<std::size_t>(s.num_experts)), choices, picked;
  for (int e = 0; e < static_cast<int>(s.num_experts); ++e) all[static_cast<std::size_t>(e)] = e;
  const bool masked = moe.policy->masks_router();
  for (std::size_t l = 0; l < moe.pools.size(); ++l) {
    if (!moe.pools[l]) continue;  // a dense layer
    const auto layer = static_cast<std::int64_t>(l);
    RerouteTable& table = *moe.tables[l];
    std::vector<std::int64_t> experts(static_cast<std::size_t>(T * k));
    for (std::int64_t t = 0; t < T; ++t) {
      // Masked gating: the experts with a slot for the token's row (every one where none has, as the
      // CPU backend's uniform logits leave it; those pairs are then dropped).
      std::span<const int> from = all;
      if (masked) {
        choices.clear();
        for (int e : all)
          if (table.at(rows[static_cast<std::size_t>(t)], e) != RerouteTable::kMiss) choices.push_back(e);
        if (static_cast<std::int64_t>(choices.size()) >= k) from = choices;
      }
      if (moe.importance) {  // SwapMoE's importance, from the choice the token would make with every expert resident
        device_.routes->route(layout.request[static_cast<std::size_t>(t)], layout.position[static_cast<std::size_t>(t)], layer, all, picked);
        for (int e : picked) moe.importance->add(layer, rows[static_cast<std::size_t>(t)], e, 1.0, 1.0 / static_cast<double>(k));
      }
      device_.routes->route(layout.request[static_cast<std::size_t>(t)], layout.position[static_cast<std::size_t>(t)], layer, from, picked);
      if (static_cast<std::int64_t>(picked.size()) != k)
        throw std::logic_error("a route source gave " + std::to_string(picked.size()) + " experts for top-" + std::to_string(k));
      std::copy(picked.begin(), picked.end(), experts.begin() + t * k);
    }
    groups.clear();
    const RoutePlan plan = run_moe_waves(
        layer, experts, k, layout, moe, r,
        [&](const ExpertLoad& load) {
          const double before = device_seconds_;
          const TierRead read = load_expert(layer, load.slot, load.content);
          layer_loads[l] += device_seconds_ - before;
          return std::pair{read, device_seconds_ - before};
        },
        [&](const RouteWave& wave, std::size_t) {
          for (const SlotGroup& g : wave.groups) {
            // A scratch slot may be reused by a later wave (and is cleared after each): its content is the load's.
            ExpertId content = g.slot.scratch ? -1 : moe.pools[l]->content(g.slot.slot);
            for (const ExpertLoad& load : wave.loads)
              if (g.slot.scratch && load.slot.scratch && load.slot.slot == g.slot.slot) content = load.content;
            if (content < 0) throw std::logic_error("a slot group without content in layer " + std::to_string(l));
            groups.push_back({content, static_cast<std::int64_t>(g.pairs.size())});
          }
        });
    layer_hits[l] = std::count(plan.outcome.begin(), plan.outcome.end(), PairOutcome::Hit);
    price_groups(groups, work.expert_rows[l], work.delta_rows[l]);
  }

  const StepCost cost = price_step(shapes_, device_.profile, work);
  device_seconds_ += cost.seconds(compute_slowdown_);
  link_idle(cost.seconds(compute_slowdown_));
  if (T == 1)  // one token alone: each layer's time by its hits among the top-k (Multi-MoE's Table 1)
    for (std::size_t l = 0; l < moe.pools.size(); ++l)
      if (moe.pools[l])
        r.counts[static_cast<std::size_t>(layout.sequence[0])][l].add_alone(layer_hits[l], cost.attention[l].seconds(compute_slowdown_),
                                                                   cost.block[l].seconds(compute_slowdown_) + layer_loads[l]);

  // No logits: a drawn token is token 0, with all the probability.
  r.logits.resize(batch.chunks.size());
  for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    const StepChunk& c = batch.chunks[ci];
    if (c.emit == Emit::Nothing) continue;
    if (c.emit == Emit::Last && c.draw_temperature) {
      r.candidates.resize(batch.chunks.size());
      TokenCandidates& d = r.candidates[ci];
      d.vocab = s.vocab_size;
      d.temperature = *c.draw_temperature;
      d.normaliser = 1;  // exp(0) for token 0; the rest have no probability
      d.keys = {kernels::token_key(0.0f, 0)};
      d.row = [vocab = s.vocab_size] {
        std::vector<float> row(static_cast<std::size_t>(vocab), -std::numeric_limits<float>::infinity());
        row[0] = 0;
        return row;
      };
      continue;
    }
    Logits& out = r.logits[ci];
    out.vocab = s.vocab_size;
    out.rows = c.emit == Emit::All ? static_cast<std::int64_t>(c.tokens.size()) : 1;
    out.values.assign(static_cast<std::size_t>(out.rows * out.vocab), 0.0f);
  }
  return r;
}

}  // namespace

std::shared_ptr<RouteSource> drawn_routes(double concentration, std::uint64_t seed, std::int64_t experts, std::int64_t top_k) {
  return std::make_shared<DrawnRoutes>(concentration, seed, experts, top_k);
}

std::unique_ptr<Backend> make_sim_backend(const HostStore& store, const BackendShape& shape, const SimulatedDevice& device,
                                          double copy_slowdown, double compute_slowdown) {
  return std::make_unique<SimBackend>(store, shape, device, copy_slowdown, compute_slowdown);
}

}  // namespace mosaic
