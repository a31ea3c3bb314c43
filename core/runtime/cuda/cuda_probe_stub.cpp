// The build had no nvcc: the CUDA backend is not in it.
#include <memory>

#include "common/error.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/cuda/kernel_timing.h"

namespace mosaic {
namespace {

[[noreturn]] void no_cuda(const char* what_to_do) { throw DeviceError("device cuda", "", *cuda::unavailable(), what_to_do); }
constexpr const char* kMeasureThere = "run this on a machine with an NVIDIA GPU and a CUDA build";

}  // namespace

std::optional<std::string> cuda::unavailable() {
  return "this build of Mosaic has no CUDA backend (nvcc was not found when it was configured)";
}

std::optional<std::uint64_t> cuda::memory_bytes() { return std::nullopt; }

std::optional<std::string> cuda::description() { return std::nullopt; }

cuda::DeviceRates cuda::measure_rates() { no_cuda(kMeasureThere); }

std::vector<cuda::KernelTime> cuda::time_decode_kernels(const ModelSpec&, int, bool, TimingRounds) { no_cuda(kMeasureThere); }

cuda::AttentionTime cuda::time_decode_attention(const ModelSpec&, int) { no_cuda(kMeasureThere); }

std::vector<cuda::DeltaKernelTime> cuda::time_delta_kernels(std::int64_t, std::int64_t, std::span<const int>, TimingRounds) { no_cuda(kMeasureThere); }

std::unique_ptr<Backend> make_cuda_backend(const HostStore&, const BackendShape&) {
  no_cuda("use --device cpu, or rebuild with the CUDA toolkit installed");
}

}  // namespace mosaic
