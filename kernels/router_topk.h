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

// DeepSeek's routers, as transformers' DeepseekV2TopkRouter and DeepseekV3TopkRouter compute them
// (and core's route_tokens on the CPU):
// - Softmax scores: probabilities over all experts. With BestScore groups (V2's
//   group_limited_greedy) a token chooses among the topk_group groups of highest best probability;
//   the other groups' experts count 0, and weigh 0 if chosen.
// - Sigmoid scores (V3's noaux_tc): a chosen expert weighs its sigmoid score; choosing ranks that
//   score plus `bias` (e_score_correction_bias); with TopTwoSum groups a token chooses among the
//   topk_group groups of highest sum of their two best ranks, the others at −∞. Renormalized with
//   1e-20 in the denominator.
// Then weights renormalized where asked and multiplied by `scale` (routed_scaling_factor). Groups
// are n_group contiguous runs of experts / n_group. Masked gating (SwapMoE, as core's route_tokens
// takes `absent`): with `table` and `rows` given, an expert whose entry in its token's table row is
// negative (not resident) takes no softmax probability, and is ranked −∞ among sigmoid scores while
// still weighing its score — unless no expert of the row is resident, which masks nothing. NaN counts
// as the lowest finite logit. Ties go to the lower id, among groups too.
enum class RouterScores : int { Softmax, Sigmoid };
enum class GroupRank : int { None, BestScore, TopTwoSum };
struct RouterRule {
  RouterScores scores = RouterScores::Softmax;
  GroupRank groups = GroupRank::None;
  int n_group = 1, topk_group = 1;
  bool renormalize = false;
  float scale = 1.0f;
  const float* bias = nullptr;  // [experts] fp32, or none: a host pointer for the reference, a device one for CUDA
  // Masked gating: [targets, experts] reroute table and each token's row of it (host or device
  // pointers, as `bias`); none: nothing masked.
  const std::int32_t* table = nullptr;
  const std::int32_t* rows = nullptr;
};
constexpr int kRouterMaxGroups = 32;
// Whether a rule is one the kernel takes: groups dividing the experts, at most kRouterMaxGroups of
// them, topk_group of them holding at least k experts.
bool router_rule_valid(const RouterRule& rule, int experts, int k);
void router_choice_reference(const float* logits, int tokens, int experts, int k, const RouterRule& rule, std::int32_t* ids,
                             float* weights);
// One warp per token. cudaErrorInvalidValue where router_rule_valid is false or experts > kRouterMaxExperts.
int router_choice_cuda(const float* logits, int tokens, int experts, int k, RouterRule rule, std::int32_t* ids, float* weights,
                       void* stream);

}  // namespace mosaic::kernels
