// runtime/cuda/cuda_probe.h on simt (tests/simt/simt.h): its device is always there, and has no rates
// worth measuring (it is the CPU, one thread at a time).
#include "runtime/cuda/cuda_probe.h"

#include <cuda_runtime.h>

#include "common/error.h"

namespace mosaic::cuda {

std::optional<std::string> unavailable() { return std::nullopt; }

std::optional<std::uint64_t> memory_bytes() {
  std::size_t free = 0, total = 0;
  cudaMemGetInfo(&free, &total);
  return total;
}

std::optional<std::string> description() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return std::string(prop.name);
}

DeviceRates measure_rates() {
  throw DeviceError("device cuda", "", "is simt here (the kernels run on the CPU): it has no GPU rates to measure", "measure on a GPU");
}

}  // namespace mosaic::cuda
