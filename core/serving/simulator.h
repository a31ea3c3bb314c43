#pragma once
// A discrete-event simulation of the engine: the engine's own Scheduler, KV block pool and
// Reconfigurer decide every step, as they do when serving; nothing is computed. Each step's time is
// priced by the cost model (sim/step_cost.h) from the model's shapes and a device profile: set swaps
// and expert loads at the host link's bandwidth, the step's kernels by bytes and flops. Tokens are
// routed by seeded draws per (request, position, layer) (sim/routing_model.h: uniform top-k, or a
// measured routing model's per-prompt skew), so a recomputed token routes as it did and a
// strategy's hits depend only on what it keeps resident.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "serving/metrics.h"
#include "serving/workload.h"
#include "sim/device_profile.h"
#include "sim/model_shapes.h"

namespace mosaic {

// What one partition of a deployment holds and how it copies (serving/strategy.h's Deployment,
// in the simulator's terms).
struct SimPartition {
  std::vector<int> serves;     // target indices routed to this partition
  std::vector<int> set_of;     // [targets]: the resident set a target's tokens need
  int resident_sets = 1;       // K set buffers
  int warm_set = 0;            // resident before the first request, as a Deployment starts
  std::uint64_t set_bytes = 0; // what filling a set buffer copies
  double set_bandwidth = 0;    // bytes/s of those copies
  std::vector<std::vector<char>> pinned;  // [layer][expert]: a copy resident at that position (any variant's)
  std::string miss = "transient";         // transient (loaded for the step), lru (kept in spares), masked (never loaded); not prefetch
  std::int64_t spare = 0;                 // lru: misses kept per layer
  double expert_bandwidth = 0;            // bytes/s of expert loads
  double copy_slowdown = 1, compute_slowdown = 1;  // a MIG slice's share of the link and of the device
  std::optional<std::int64_t> kv_blocks;  // nullopt: unlimited
  std::int64_t kv_block_tokens = 16;
  SchedulerOptions scheduler;
};

// Records in workload order, times from the run's start, `lane` the partition. `targets` names the
// target indices the partitions use; every request's target must be served by one partition.
// `concentration`: a routing model's (sim/routing_model.h); 0 routes uniformly.
std::vector<RequestRecord> simulate_workload(const ModelShapes& shapes, const DeviceProfile& device,
                                             const std::vector<SimPartition>& partitions, const std::vector<std::string>& targets,
                                             const std::vector<WorkloadRequest>& workload, std::uint64_t seed, double concentration = 0);

}  // namespace mosaic
