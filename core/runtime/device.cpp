#include "runtime/device.h"

#include "common/machine.h"
#include "runtime/cuda/cuda_probe.h"

namespace mosaic {

std::optional<std::uint64_t> device_memory_bytes(Device d) {
  if (d == Device::Cpu) return physical_memory_bytes();
  return cuda::memory_bytes();
}

std::string device_description(Device d) {
  if (d == Device::Cpu) return "cpu";
  const auto gpu = cuda::description();
  return gpu ? "cuda: " + *gpu : "cuda";
}

std::optional<std::string> device_unavailable(Device d) {
  if (d == Device::Cpu) return std::nullopt;
  return cuda::unavailable();
}

}  // namespace mosaic
