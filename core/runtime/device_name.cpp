// Device names apart from the probes in device.cpp: the config parsers (formats.cmake) need them,
// and the fuzz build links the parsers without CUDA.
#include "runtime/device.h"

namespace mosaic {

std::string_view device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

std::optional<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda" || name == "gpu") return Device::Cuda;
  return std::nullopt;
}

std::string_view cpu_weights_name(CpuWeights w) {
  switch (w) {
    case CpuWeights::Fp32: return "fp32";
    case CpuWeights::Mapped: return "mapped";
    case CpuWeights::Stored: break;
  }
  return "stored";
}

std::optional<CpuWeights> parse_cpu_weights(std::string_view name) {
  if (name == "stored") return CpuWeights::Stored;
  if (name == "fp32") return CpuWeights::Fp32;
  if (name == "mapped") return CpuWeights::Mapped;
  return std::nullopt;
}

}  // namespace mosaic
