// One warp per token (router_topk.cuh).
#include "kernels/router_topk.cuh"

namespace mosaic::kernels {
namespace {

__global__ void router_topk_kernel(const float* __restrict__ logits,  // [tokens, experts]
                                   int tokens, int experts, int k, bool renormalize,
                                   std::int32_t* __restrict__ ids,    // [tokens, k]
                                   float* __restrict__ weights) {     // [tokens, k]
  wait_for_previous_grid();
  const int token = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (token >= tokens) return;  // whole warps exit together: tokens map to warps
  topk_of_row(logits + static_cast<long long>(token) * experts, experts, k, renormalize, ids + token * k, weights + token * k);
}

__global__ void router_choice_kernel(const float* __restrict__ logits, int tokens, int experts, int k, RouterRule rule,
                                     std::int32_t* __restrict__ ids, float* __restrict__ weights) {
  wait_for_previous_grid();
  const int token = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (token >= tokens) return;
  choose_of_row(logits + static_cast<long long>(token) * experts, experts, k, rule, token, ids + token * k, weights + token * k);
}

constexpr int kWarpsPerBlock = 4;

}  // namespace

int router_topk_cuda(const float* logits, int tokens, int experts, int k, bool renormalize, std::int32_t* ids,
                     float* weights, void* stream) {
  if (experts > kRouterMaxExperts || k > experts || k <= 0) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  const int blocks = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return launch_kernel(router_topk_kernel, blocks, kWarpsPerBlock * kWarp, 0, as_stream(stream), logits, tokens, experts, k, renormalize,
                       ids, weights);
}

int router_choice_cuda(const float* logits, int tokens, int experts, int k, RouterRule rule, std::int32_t* ids, float* weights,
                       void* stream) {
  if (experts > kRouterMaxExperts || !router_rule_valid(rule, experts, k)) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return static_cast<int>(cudaSuccess);
  const int blocks = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return launch_kernel(router_choice_kernel, blocks, kWarpsPerBlock * kWarp, 0, as_stream(stream), logits, tokens, experts, k, rule, ids,
                       weights);
}

}  // namespace mosaic::kernels
