#pragma once
// The seam between the runtime's bookkeeping and a device: storage for expert slots, resident-set
// buffers and KV blocks, copies from the host store into them, and the batched forward step. The CPU
// backend (LibTorch, fp32) implements it; the CUDA backend implements the same interface.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "runtime/cuda_options.h"
#include "runtime/device.h"
#include "runtime/host_store.h"
#include "runtime/prefetch_gate.h"
#include "runtime/route_plan.h"
#include "runtime/step.h"
#include "runtime/store_map.h"

namespace mosaic {

class ExpertImportance;

// What the backend allocates, as the runtime sized it from the budget.
struct BackendShape {
  std::vector<std::int64_t> layer_slots;  // [layers]: pinned + spare slots (0 in dense layers)
  // [layers]: the slots [first, first + count) of a layer are delta-only: pinned delta experts whose
  // base is pinned in another slot of the layer, so they hold only the packed delta (DeltaMoE).
  std::vector<std::pair<std::int64_t, std::int64_t>> layer_delta_only;
  std::int64_t scratch_slots = 0;
  int buffers = 1;                        // resident-set buffers
  std::int64_t kv_block_tokens = 16;
  std::optional<std::int64_t> kv_blocks;  // nullopt: grown on demand
  CpuWeights cpu_weights = CpuWeights::Stored;  // the CPU backend's weight dtype (device.h)
  CudaOptions cuda;                             // how the CUDA backend runs (cuda_options.h)
};

// Everything a step's MoE layers route through: per layer the reroute table and slots (null in dense
// layers), the shared scratch pool, the host store and the miss policy; and, for virtual experts,
// where each routed pair's importance goes (from the unmasked router: what the tokens would choose).
struct MoeState {
  std::vector<RerouteTable*> tables;
  std::vector<SlotPool*> pools;
  SlotPool* scratch = nullptr;
  const HostStore* store = nullptr;
  const MissPolicy* policy = nullptr;
  ExpertImportance* importance = nullptr;
  RecentExperts* recent = nullptr;  // each target's misses, for the host tier to read ahead
  PrefetchGate* gate = nullptr;     // the prefetch policy's: which layers are worth predicting
  // The first MoE layer after `layer` (the one a prefetch fills while `layer` computes); -1: none.
  std::int64_t next_moe_layer(std::int64_t layer) const {
    for (auto l = static_cast<std::size_t>(layer) + 1; l < pools.size(); ++l)
      if (pools[l]) return static_cast<std::int64_t>(l);
    return -1;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Copies a host-store expert into a slot of `layer` (or of the scratch pool when scratch),
  // converting to the compute dtype; returns the host bytes read, and of them those read from disk.
  // May be called from another thread (virtual experts' copy path) while run() executes, for a slot
  // that no reroute-table entry names.
  virtual TierRead load_expert(std::int64_t layer, SlotRef slot, ExpertId expert) = 0;
  // Virtual experts' updates (virtual_experts.h): copies an expert into a slot behind the steps. A
  // real backend copies at once, as load_expert does (on the caller's copy thread); a priced one
  // queues the copy on its link, which carries it while steps compute, and copies_landed() says when
  // every such copy has arrived.
  virtual TierRead copy_behind(std::int64_t layer, SlotRef slot, ExpertId expert) { return load_expert(layer, slot, expert); }
  virtual bool copies_landed() { return true; }
  // Whether copy_behind only queues its copies (on a device's copy engine, say) and returns at once:
  // then virtual experts call it on the engine's thread, needing no copy thread of their own.
  virtual bool queues_copies() const { return false; }
  // Waits until every copy_behind has landed (a backend that queues them; the others' have).
  virtual void await_copies() {}
  // Fills a resident-set buffer with the store's non-expert set `set`, copying only the tensors that
  // differ from what the buffer holds; returns the host bytes read.
  virtual std::uint64_t load_set(int buffer, int set) = 0;
  // Look-ahead swaps: begins load_set(buffer, set) and returns at once with the host bytes it will
  // read; steps run meanwhile, none of them reading `buffer`, until wait_set(buffer).
  virtual std::uint64_t start_set(int buffer, int set) = 0;
  virtual bool set_ready(int buffer) = 0;  // whether that fill has finished; never blocks
  virtual void wait_set(int buffer) = 0;   // until it has (rethrowing what it threw); at once if none
  // Runs every chunk's tokens through the model: attention over each sequence's KV blocks (written
  // as it goes), the MoE layers through `moe` (routing, misses, loads and expert compute happen
  // here), and the logits the chunks ask for.
  virtual StepResult run(const StepBatch& batch, MoeState& moe) = 0;
  // A backend that prices its work instead of doing it (the simulated device, sim_backend.h) keeps
  // a clock of its own: the seconds of device time it has priced so far, never decreasing. Where it
  // has one, the runtime and the engine time its swaps, loads and steps on it (DeviceTimer) instead
  // of on the wall clock. nullopt: a real device, timed by the wall clock.
  virtual std::optional<double> device_seconds() const { return std::nullopt; }
  // A family change served in place (Runtime::rebase): whether this backend can take the next
  // family's store over the memory it holds, and doing so — reading `next` from now on, each slot
  // and buffer translated through `map` (what maps to -1 is held by nobody and never read again
  // before it is filled). Called between steps, with no fill ahead under way.
  virtual bool rebases() const { return false; }
  virtual void rebase(const HostStore&, const StoreMap&) { throw std::logic_error("this backend does not change its family in place"); }
};

std::unique_ptr<Backend> make_cpu_backend(const HostStore& store, const BackendShape& shape);
// bf16 weights on the GPU (runtime/cuda/). Throws DeviceError when there is none or the build has no CUDA.
std::unique_ptr<Backend> make_cuda_backend(const HostStore& store, const BackendShape& shape);

}  // namespace mosaic
