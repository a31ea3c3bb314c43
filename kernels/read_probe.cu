#include "kernels/kernel_util.cuh"
#include "kernels/read_probe.h"

namespace mosaic::kernels {
namespace {

__global__ void read_probe_kernel(const uint4* __restrict__ data, std::size_t words, unsigned* sink) {
  wait_for_previous_grid();
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);  // practically never taken; keeps the loads live
}

}  // namespace

int read_probe_cuda(const void* data, std::size_t bytes, unsigned* sink, void* stream) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  read_probe_kernel<<<sms * 8, 512, 0, as_stream(stream)>>>(static_cast<const uint4*>(data), bytes / 16, sink);
  return launched();
}

}  // namespace mosaic::kernels
