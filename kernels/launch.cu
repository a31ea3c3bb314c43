#include "kernels/kernel_util.cuh"

namespace mosaic::kernels {
namespace {

__global__ void compiled_for_kernel() { wait_for_previous_grid(); }

}  // namespace

bool programmatic_launches_possible() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, compiled_for_kernel) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major >= 9 && attributes.ptxVersion >= 90;
}

}  // namespace mosaic::kernels
