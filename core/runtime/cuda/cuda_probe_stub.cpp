// The build had no nvcc: the CUDA backend is not in it.
#include <memory>

#include "common/error.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_probe.h"

namespace mosaic {

std::optional<std::string> cuda::unavailable() {
  return "this build of Mosaic has no CUDA backend (nvcc was not found when it was configured)";
}

std::optional<std::uint64_t> cuda::memory_bytes() { return std::nullopt; }

std::optional<std::string> cuda::description() { return std::nullopt; }

cuda::DeviceRates cuda::measure_rates() {
  throw DeviceError("device cuda", "", *cuda::unavailable(), "run this on a machine with an NVIDIA GPU and a CUDA build");
}

std::unique_ptr<Backend> make_cuda_backend(const HostStore&, const BackendShape&) {
  throw DeviceError("device cuda", "", *cuda::unavailable(), "use --device cpu, or rebuild with the CUDA toolkit installed");
}

}  // namespace mosaic
