#include "runtime/device.h"

#include "common/machine.h"
#include "runtime/cuda/cuda_probe.h"

namespace mosaic {

std::string_view device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

std::optional<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda" || name == "gpu") return Device::Cuda;
  return std::nullopt;
}

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
