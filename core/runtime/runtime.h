#pragma once
// The multi-variant runtime: every device resource under one byte budget — K resident-set buffers,
// per-layer expert slots (a layout's pinned copies and a miss policy's spares), a shared scratch
// pool, KV blocks and the activation workspace — the reroute tables that map each target's routed
// experts to slots, and the backend that runs a step over them. A strategy (serving/strategy.h) is a
// RuntimeConfig. Used by one thread at a time: the Engine's.
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/capacity.h"
#include "runtime/device.h"
#include "runtime/device_budget.h"
#include "runtime/device_timer.h"
#include "runtime/kv_blocks.h"
#include "runtime/pinned_expert.h"
#include "runtime/policies.h"
#include "runtime/reconfigurer.h"
#include "runtime/request_stats.h"
#include "runtime/virtual_experts.h"

namespace mosaic {

struct SimulatedDevice;

struct RuntimeConfig {
  std::vector<PinnedExpert> pinned;
  // Pinned after the reserve, in order, while a limited budget has room (the delta strategy's
  // deltas); the rest are left to the miss policy. A delta over a pinned base costs its packed bytes.
  std::vector<PinnedExpert> pinned_if_room;
  // Which rows a pinned slot serves: consolidated (any row, at its position: Multi-MoE) or strict
  // (rows whose own expert it is, byte for byte: ESFT adapters over their base, time-sharing).
  HitPolicy hit = HitPolicy::Consolidated;
  std::string miss = "transient";  // miss_policy.h
  // Per target, the target whose non-expert set serves it (no-reconfig: one for all); empty: its own.
  std::vector<int> non_expert_of;
  // Names served as another target (single, averaging: every name as one model).
  std::vector<std::pair<std::string, int>> aliases;
  // Time-sharing: a resident set is a target's whole model; swapping one reloads the pinned slots
  // (which then hold exactly one model's experts).
  bool whole_model_swaps = false;
  // K: non-expert sets resident at once, budget permitting; kAutoSets: every set the targets use.
  static constexpr int kAutoSets = mosaic::kAutoSets;
  int resident_sets = 1;
  double copy_slowdown = 1.0;     // space-sharing: copies take this many times as long
  double compute_slowdown = 1.0;  // space-sharing (MIG): a step's compute takes this many times as long
  std::optional<std::uint64_t> budget_bytes;  // nullopt: no limit (counted, never refused)
  ReserveSpec reserve;         // KV (context × requests), activations (prefill chunk), scratch (miss slots)
  std::int64_t kv_block_tokens = 16;
  // SwapMoE's virtual experts: the pinned experts are each layer's initial set, and it changes with
  // the traffic, through staging slots charged to the budget; needs the masked miss policy.
  std::optional<VirtualConfig> virtual_experts;
  Device device = Device::Cpu;  // the CUDA backend throws DeviceError where no GPU can be used
  CpuWeights cpu_weights = CpuWeights::Stored;  // on the CPU: bf16 weights held as bf16, or widened (device.h)
  CudaOptions cuda;  // on CUDA: which of the step's mechanisms run (cuda_options.h; the environment may override)
  // > 0: rows to be drawn from that a backend returned whole are turned into this many candidates
  // (StepResult::candidates), as the CUDA backend prepares them, so that tests run the engine's
  // prepared draws on the CPU.
  int host_candidates = 0;
  // Set: nothing is computed; the steps, swaps and loads are priced on this simulated device
  // (sim_backend.h), whose clock the runtime and the engine then run on. The store may hold shapes
  // only (HostStore::shapes_of), and the budget may exceed this machine's memory.
  std::shared_ptr<const SimulatedDevice> simulated;
};

// Every MoE position, served from `target`.
std::vector<PinnedExpert> every_position(const ModelSpec& s, int target);
// Every delta expert of `targets`, layer by layer and round-robin over the targets, so that pins
// taken while room (RuntimeConfig::pinned_if_room) share a tight budget evenly.
std::vector<PinnedExpert> deltas_layer_major(const HostStore& store, const std::vector<int>& targets);

// One named reservation of the device budget.
struct DeviceItem {
  std::string name;
  std::uint64_t bytes = 0;
};

// A resident set made resident for a step, what it moved and how long that took.
struct SwapRecord {
  int set = -1;
  std::uint64_t bytes = 0;
  double seconds = 0;           // as the device would take it (copy slowdown included)
  double throttle_seconds = 0;  // of which the copy slowdown added, beyond the wall time measured
  bool ahead = false;           // filled ahead (load_ahead): `seconds` is the engine's time issuing it plus what the step waited
};

// A family change served in place (Runtime::rebase): the pinned experts it kept where they were,
// and the copies it queued for the slots whose owner changed (made over the next steps).
struct RebaseResult {
  std::int64_t kept = 0, copies = 0;
  std::uint64_t copy_bytes = 0;
};

// Those copies as they are made.
struct RepinProgress {
  std::int64_t pending = 0, copies = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
};

class Runtime {
 public:
  // Throws BudgetError naming the first item that does not fit, InvalidArgument for a bad config.
  Runtime(const HostStore& store, RuntimeConfig config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The engine thread's, and anyone's while no change is served in place; other threads that may
  // read it meanwhile take shared_store().
  const HostStore& store() const { return *store_; }
  std::shared_ptr<const HostStore> shared_store() const;
  const RuntimeConfig& config() const { return config_; }
  // Whether the CPU backend reads the weights where the checkpoints are mapped (CpuWeights::Mapped).
  bool reads_in_place() const { return config_.device == Device::Cpu && config_.cpu_weights == CpuWeights::Mapped; }
  const MissPolicy& miss_policy() const { return *policy_; }
  const DeviceBudget& budget() const { return budget_; }
  const std::vector<DeviceItem>& device_items() const { return items_; }
  // Of those, the weights held for the runtime's life: resident non-expert sets, pinned experts and
  // packed deltas; not the KV cache, activations, or the slots misses load into.
  std::uint64_t weight_bytes() const;
  const SlotPool& slots(std::int64_t layer) const { return *pools_[static_cast<std::size_t>(layer)]; }
  const SlotPool& scratch() const { return *scratch_; }
  const RerouteTable& reroute(std::int64_t layer) const { return *tables_[static_cast<std::size_t>(layer)]; }
  const KvBlockPool& kv_blocks() const { return kv_; }
  KvBlockPool& kv_blocks() { return kv_; }
  int resident_capacity() const { return reconfigurer_.buffers(); }
  std::vector<int> resident_sets() const { return reconfigurer_.resident(); }
  // Rows in activation workspace: the most tokens one step may run.
  std::int64_t max_step_tokens() const { return config_.reserve.prefill_chunk; }

  // The target (reroute row) a request name is served as; -1 for a name not served.
  int target_of(const std::string& name) const;
  // The resident set a target's tokens need.
  int set_of(int target) const;

  // Makes `sets` resident (at most resident_capacity()), copying and timing each one brought in.
  std::vector<SwapRecord> make_resident(std::span<const int> sets);
  int buffer_of(int set) const { return reconfigurer_.buffer_of(set); }
  // Look-ahead swaps: after make_resident() for a step, begins filling buffers that step does not
  // need with `upcoming` sets, in order, while it runs; make_resident() of one of them later waits
  // only for what is left of its fill. None under whole-model swaps (they reload pinned slots the
  // step reads) or a copy slowdown (a slice's copies are priced, not overlapped).
  void load_ahead(std::span<const int> upcoming);
  // Whether load_ahead fills anything: not under whole-model swaps or a copy slowdown.
  bool fills_ahead() const { return !config_.whole_model_swaps && config_.copy_slowdown <= 1.0; }
  // Under a host budget: the non-expert sets of the running requests' targets kept resident in the host tier
  // (the last to give way), and for the waiting requests' targets (in queue order) their sets and the
  // experts their earlier requests missed on read ahead from disk by the tier's reader thread, so
  // that their swaps and misses do not wait for the disk. Nothing without a budget.
  void read_ahead(std::span<const int> running_targets, std::span<const int> waiting_targets) const;
  bool reads_ahead() const { return store_->tier().budget().has_value(); }  // whether read_ahead does anything
  // Sets being filled ahead whose fill has not finished (the scheduler admits their requests after).
  std::vector<int> loading_sets() const;
  // One step; the chunks' `buffer` must come from buffer_of() after make_resident().
  StepResult run(const StepBatch& batch);
  // Times what the backend does from now: wall time, or a simulated device's (device_timer.h).
  DeviceTimer timer() const { return DeviceTimer(*backend_); }
  // Whether the backend prices its work (a simulated device, which charges space-sharing's slowdowns
  // itself) rather than doing it (timed, the slowdowns charged by the runtime).
  bool priced() const { return backend_->device_seconds().has_value(); }

  // A family change served in place — a variant, adapter or delta folder added or removed — over
  // the device memory this runtime holds, so that running requests keep their KV cache and resident
  // sets and go on at the next step. in_place() says whether `next` fits that memory as it is laid
  // out (no more pinned slots a layer than it holds, the same spare slots, resident-set buffers,
  // miss slots and KV blocks under the same budget; K stays what it is) and returns the config to
  // rebase with, or nullopt and why not. Any thread; not while rebase() runs.
  std::optional<RuntimeConfig> in_place(const HostStore& next, RuntimeConfig config, std::string& why_not) const;
  // Per layer, the slots pinned dense experts may take: a layout planned within these is served in
  // place (with the rest of in_place's terms).
  std::vector<std::int64_t> pinned_slots() const;
  // The engine thread's, between steps, with a config in_place() returned: every slot and buffer
  // keeps what it holds under the next store's ids; pinned experts the next layout keeps stay in
  // their slots, and the slots whose owner changes are queued for copies that the next steps make
  // (each step as many as its own time allows, so that no step waits longer than itself for them).
  // Until an expert's copy lands its rows miss. `next` is kept alive for the runtime's life.
  RebaseResult rebase(std::shared_ptr<const HostStore> next, RuntimeConfig config);
  const RepinProgress& repins() const { return repins_; }
  // Makes the queued copies for up to `seconds` (at least one; all when nullopt): an idle engine's.
  void repin(std::optional<double> seconds);

  // Virtual experts (RuntimeConfig::virtual_experts); null without.
  VirtualExperts* virtual_experts() { return virtual_.get(); }
  // The prefetch policy's judge of where predictions pay; null under other policies.
  const PrefetchGate* prefetch_gate() const { return moe_.gate; }
  const VirtualExperts* virtual_experts() const { return virtual_.get(); }

 private:
  void load_pinned(int target, std::uint64_t& bytes);  // whole-model swaps
  void judge_prefetches(const StepResult& r);           // tells the gate what each layer's step measured
  // Space-sharing's slowdowns on a step a backend timed (`wall` seconds): what the slice adds, as
  // throttle time and in the step's load and per-layer times.
  void charge_slowdowns(StepResult& r, double wall) const;
  // Points `layer`'s reroute rows at what its slots hold: each row at its own expert's pinned copy,
  // then (consolidated hits) at the position's first pinned copy, then at a kept miss of its own.
  void route_layer(std::int64_t layer);
  void index_pins();  // pins_of_layer_

  struct AheadFill {
    int set = -1;  // -1: none under way or unclaimed in that buffer
    std::uint64_t bytes = 0;
    double issue_seconds = 0;  // the engine's time in start_set (the whole fill where it is synchronous)
  };

  const HostStore* store_;
  std::shared_ptr<const HostStore> next_store_;  // the store a change served in place handed over
  mutable std::mutex store_m_;                   // guards next_store_ for shared_store()
  RuntimeConfig config_;
  std::vector<char> delta_only_;  // [config_.pinned]: holds only a packed delta, its base in another slot
  std::vector<std::int32_t> pin_slot_;  // [config_.pinned]: its slot; -1 while a change's copy is queued
  std::vector<std::vector<std::size_t>> pins_of_layer_;  // [layers]: indices into config_.pinned
  BackendShape shape_;
  struct QueuedPin {
    std::size_t pin = 0;  // into config_.pinned
    std::int32_t slot = 0;
  };
  std::deque<QueuedPin> queued_pins_;  // a change's copies: dense ones first, then delta-only ones
  RepinProgress repins_;
  double last_step_seconds_ = 0;
  DeviceBudget budget_;
  std::vector<DeviceItem> items_;
  std::unique_ptr<MissPolicy> policy_;
  std::vector<std::unique_ptr<SlotPool>> pools_;       // [layers]; null in dense layers
  std::vector<std::unique_ptr<RerouteTable>> tables_;  // [layers]; null in dense layers
  std::unique_ptr<SlotPool> scratch_;
  Reconfigurer reconfigurer_;
  std::vector<AheadFill> ahead_;  // [buffers]
  KvBlockPool kv_;
  std::unique_ptr<Backend> backend_;
  MoeState moe_;
  RecentExperts recent_;  // each target's misses (read ahead under a host budget)
  PrefetchGate gate_;     // the prefetch policy's, per layer
  std::unique_ptr<VirtualExperts> virtual_;  // after backend_: its copy thread loads through it
};

}  // namespace mosaic
