#pragma once
// What a device can do, in the few numbers the cost model prices a step with ("mosaic.device/1"):
//   {"schema": "mosaic.device/1", "name": "...", "source": "how the numbers were obtained",
//    "h2d_pinned_gb_per_s": n, "h2d_pageable_gb_per_s": n,  host → device copies (1 GB = 1e9 bytes)
//    "memory_gb_per_s": n,        the device memory's bandwidth as kernels reach it (HBM; DRAM on a CPU)
//    "peak_tflops": n,            dense matmul throughput in the compute dtype (1e12 flop/s)
//    "compute_dtype": "bf16" | "fp32",  what the backend holds weights in on the device
//    "launch_us": n,              host overhead of one kernel (one LibTorch op on the CPU backend)
//    "row_us": n,                 host overhead per token row per layer (routing, gathers; optional, 0)
//    "sync_us": n,                the fixed host cost of one step (its synchronization, its setup)
//    "copy_setup_us": n}          the fixed cost of one host → device load (an expert, a non-expert
//                                 set) whatever its size: its setup and synchronization (optional, 0).
//                                 A MIG slice pays it whole; only the bytes share the link.
// Profiles live in sample_configs/devices/; `mosaic-cli bench-device` measures one.
#include <filesystem>
#include <string>

namespace mosaic {

struct DeviceProfile {
  std::string name, source;
  double h2d_pinned = 0, h2d_pageable = 0;  // bytes/s
  double memory_bandwidth = 0;              // bytes/s
  double peak_flops = 0;                    // flop/s
  std::size_t compute_bytes = 2;            // bytes per weight element as the device computes on it
  double launch_seconds = 0, sync_seconds = 0;
  double row_seconds = 0;  // per token row per layer
  double copy_setup_seconds = 0;  // per host → device load
};

// Where the host keeps what the device copies: pinned memory reaches the profile's h2d_pinned rate,
// pageable memory its h2d_pageable rate (the Multi-MoE paper's non-expert swaps, state-dict copies).
struct HostMemory {
  bool experts_pinned = true, non_expert_pinned = true;
};

// Throws IoError, FormatError naming the field (a misspelt key with the nearest valid one; a
// number that is not positive), or UnsupportedError for another schema version.
DeviceProfile load_device_profile(const std::filesystem::path& path);
DeviceProfile parse_device_profile(const std::string& text, const std::string& file);
std::string device_profile_json(const DeviceProfile& p);  // the file's text, round-trips

}  // namespace mosaic
