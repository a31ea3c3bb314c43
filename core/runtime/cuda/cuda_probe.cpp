#include "runtime/cuda/cuda_probe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "kernels/read_probe.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/event_timing.h"

namespace mosaic::cuda {

std::optional<std::string> unavailable() {
  // cudart is linked statically: without a driver this returns an error rather than failing to load.
  const cudaError_t e = cudaFree(nullptr);
  // Without an NVIDIA driver the runtime says "CUDA driver version is insufficient", which reads as
  // if an update would help: say what is missing instead.
  std::error_code ec;
  if (e != cudaSuccess && !std::filesystem::exists("/dev/nvidiactl", ec)) return std::string("no NVIDIA GPU or driver found");
  if (e == cudaErrorNoDevice) return std::string("no NVIDIA GPU found (the driver is installed)");
  if (e != cudaSuccess) return std::string("the NVIDIA driver cannot run CUDA here: ") + cudaGetErrorString(e);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return "no CUDA GPU was found";
  return cublas_unavailable();  // before anything is allocated on the device
}

std::optional<std::uint64_t> memory_bytes() {
  if (unavailable()) return std::nullopt;
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
  return total;
}

std::optional<std::string> description() {
  if (unavailable()) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return std::nullopt;
  char text[320];
  std::snprintf(text, sizeof text, "%s, %.1f GiB, compute %d.%d", prop.name, double(prop.totalGlobalMem) / double(1ull << 30), prop.major,
                prop.minor);
  return std::string(text);
}

DeviceRates measure_rates() {
  if (const auto why = unavailable()) throw DeviceError("device cuda", "", *why);
  DeviceRates r;
  cudaDeviceProp prop{};
  MOSAIC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  r.name = prop.name;
  cudaStream_t s;
  MOSAIC_CUDA_CHECK(cudaStreamCreate(&s));
  {
    const std::size_t bytes = std::size_t(2) << 30;
    DeviceBuffer data(bytes), sink(sizeof(unsigned));
    MOSAIC_CUDA_CHECK(cudaMemset(data.get(), 1, bytes));
    r.read_bytes_per_s = double(bytes) / best_time(s, 10, [&] {
      MOSAIC_CUDA_CHECK(kernels::read_probe_cuda(data.get(), bytes, sink.get<unsigned>(), s));
    });
  }
  {
    const std::size_t bytes = std::size_t(1) << 30;
    PinnedBuffer host(bytes);
    DeviceBuffer dev(bytes);
    r.pinned_h2d_bytes_per_s = double(bytes) / best_time(s, 5, [&] {
      MOSAIC_CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice, s));
    });
  }
  {
    const int n = 8192;
    DeviceBuffer a(std::size_t(n) * n * 2), b(std::size_t(n) * n * 2), c(std::size_t(n) * n * 4);
    MOSAIC_CUDA_CHECK(cudaMemset(a.get(), 0, a.bytes()));
    MOSAIC_CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
    cublasHandle_t h;
    MOSAIC_CUDA_CHECK(cublas().create(&h));
    MOSAIC_CUDA_CHECK(cublas().set_stream(h, s));
    const float one = 1, zero = 0;
    r.bf16_flops = 2.0 * n * double(n) * n / best_time(s, 5, [&] {
      MOSAIC_CUDA_CHECK(cublas().gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n, b.get(), CUDA_R_16BF, n,
                                     &zero, c.get(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    cublas().destroy(h);
  }
  cudaStreamDestroy(s);
  return r;
}

}  // namespace mosaic::cuda
