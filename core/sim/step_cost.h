#pragma once
// The time one engine step takes on a device, priced from the bytes it reads and the flops it does
// (a roofline per kernel: the slower of the two, plus the host's launch overhead), and the time a
// host → device copy takes. What the simulated device charges (runtime/sim_backend.h).
#include <cstdint>
#include <vector>

#include "sim/device_profile.h"
#include "sim/model_shapes.h"

namespace mosaic {

struct StepWork {
  struct Chunk {
    std::int64_t tokens = 0;   // rows it adds to the step
    std::int64_t context = 0;  // positions cached after it (what its attention reads)
  };
  std::vector<Chunk> chunks;
  std::int64_t groups = 1;   // resident-set groups: each reads its own non-expert weights once
  std::int64_t emitted = 0;  // rows through the LM head (one per sequence that samples)
  // Per layer (empty in dense layers): the rows each distinct expert computes.
  std::vector<std::vector<std::int64_t>> expert_rows;
  // Per layer, each packed delta's rows and bytes (DeltaMoE's decoupled compute: its base's dense
  // matrices run once over the base's rows and every delta's, counted in expert_rows; each delta
  // reads its packed bytes for its own rows). Empty without deltas.
  struct DeltaRows {
    std::int64_t rows = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<std::vector<DeltaRows>> delta_rows;
};

struct StepCost {
  double roofline = 0;  // the kernels' bytes and flops, at the device's bandwidth and peak
  double overhead = 0;  // launches and the step's synchronization: host time, not sliced by MIG
  // What the price is made of (bench-device fits a profile to measured steps from these).
  double bytes = 0, flops = 0, launches = 0, row_layers = 0;
  double seconds(double compute_slowdown = 1) const { return roofline * compute_slowdown + overhead; }
  // Each layer's two parts, [layers] (the LM head and the step's synchronization belong to none):
  // attention with its KV reads, and the MLP or MoE block after it. Multi-MoE's Table 1 prices them.
  struct Part {
    double roofline = 0, overhead = 0;
    double seconds(double compute_slowdown = 1) const { return roofline * compute_slowdown + overhead; }
  };
  std::vector<Part> attention, block;
};

StepCost price_step(const ModelShapes& shapes, const DeviceProfile& device, const StepWork& work);

// One host → device load of `bytes` at `bytes_per_second`, `slowdown` times slower (a MIG slice's
// share of the link), plus the profile's fixed cost per load, which a slice pays whole: two slices
// share the link's bytes, not each copy's setup (the Multi-MoE paper: 27.8 ms per expert on the
// whole link, 51.3 ms on half of it, not 55.6).
double copy_seconds(std::uint64_t bytes, double bytes_per_second, double slowdown, double setup_seconds);

}  // namespace mosaic
