#pragma once
// Fused MoE router: softmax over each token's expert logits, top-k (ties to the lower expert id,
// as torch.topk on CPU), optional renormalization of the k weights. A NaN logit counts as the lowest
// finite value, so every id written is an expert of the row. Raw pointers, no LibTorch.
#include <cstdint>

namespace mosaic::kernels {

// CPU reference. logits [tokens, experts]; ids [tokens, k]; weights [tokens, k], most probable first.
void router_topk_reference(const float* logits, int tokens, int experts, int k, bool renormalize,
                           std::int32_t* ids, float* weights);

// CUDA: the same on device pointers, one warp per token, on `stream` (a cudaStream_t).
// experts ≤ kRouterMaxExperts and k ≤ experts. Returns the cudaError_t of the launch as an int.
constexpr int kRouterMaxExperts = 256;
int router_topk_cuda(const float* logits, int tokens, int experts, int k, bool renormalize, std::int32_t* ids,
                     float* weights, void* stream);

}  // namespace mosaic::kernels
