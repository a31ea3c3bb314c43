#pragma once
// Whether the CUDA backend can run here, asked without needing CUDA headers (and answered by a stub
// in a build without nvcc).
#include <cstdint>
#include <optional>
#include <string>

namespace mosaic::cuda {

// nullopt when a CUDA device is usable; else why not ("no CUDA driver", "no GPU", …).
std::optional<std::string> unavailable();
// The memory of the GPU the backend uses (device 0, or its MIG instance); nullopt where none can be used.
std::optional<std::uint64_t> memory_bytes();
// "NVIDIA H100 80GB HBM3, 79.2 GiB, compute 9.0": the GPU the backend uses; nullopt where none can be used.
std::optional<std::string> description();

}  // namespace mosaic::cuda

namespace mosaic::cuda {

// The device's rates, measured now (best of several rounds): what floors are computed from.
struct DeviceRates {
  std::string name;
  double read_bytes_per_s = 0;    // a kernel reading 2 GiB once
  double pinned_h2d_bytes_per_s = 0;  // cudaMemcpy of 1 GiB from page-locked host memory
  double bf16_flops = 0;          // cuBLAS bf16 GEMM (fp32 accumulation), 8192³
};
// Throws DeviceError where no GPU can be used.
DeviceRates measure_rates();

}  // namespace mosaic::cuda
