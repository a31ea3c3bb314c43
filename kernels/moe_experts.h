#pragma once
// One MoE layer's routed experts on the device, after the router's top-k:
//   1. reroute: each (token, j) pair's expert, through the token's row of the layer's reroute table,
//      becomes a slot; pairs are grouped by slot (counting sort) into positions, and each group gets
//      its slot's weights — one block, so a step needs no host round trip when every pair hits;
//   2. the grouped SwiGLU: act[pos] = silu(gate_s · x) ∘ (up_s · x), then out[pos] = down_s · act[pos];
//   3. combine: x[t] += Σ_j weight[t, j] · out[pos(t, j)] in j order, so results do not depend on the
//      order of positions within a group.
// A slot's weights are one bf16 block: gate_up [2I, H] (gate rows, then up rows), then down [H, I].
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/l2_prefetch.h"

namespace mosaic::kernels {

// Where each pair went. Device arrays; `pairs` = tokens · k. A host plan (misses, waves, scratch
// slots) fills the same arrays, so the expert kernels serve both paths.
struct GroupedPairs {
  int* groups = nullptr;            // [1]: G
  int* begin = nullptr;             // [max_groups]: first position of group g
  int* end = nullptr;               // [max_groups]
  const bf16_t** weights = nullptr;  // [max_groups]: the slot's gate_up; its down follows 2·I·H later
  std::int32_t* pair_at = nullptr;  // [pairs]: the pair at each position
  std::int32_t* pos_of = nullptr;   // [pairs]: each pair's position, −1 when no slot serves it
  int* misses = nullptr;            // [1]: pairs whose row has no slot for their expert
};

// SwapMoE's masked gating: logits[t, e] = −inf where table[rows[t], e] < 0, unless no expert of the
// row is resident (then the row is left alone and the pairs are dropped by reroute).
int mask_router_cuda(float* logits, const std::int32_t* rows, const std::int32_t* table, int tokens, int experts,
                     void* stream);
void mask_router_reference(float* logits, const std::int32_t* rows, const std::int32_t* table, int tokens, int experts);

// SwapMoE's importance (eq. 1) of a step, without ‖E‖ (the host multiplies each expert's in): for each
// token t and pair j, scores[rows[t], ids[t, j]] += ‖h_t‖ · weights[t, j]. h [tokens, hidden]; ids and
// weights [tokens, k], the router's choice with every expert resident (pairs with an id < 0 add
// nothing); scores [targets, experts], accumulated (atomically: the order of a score's terms varies).
int importance_add_cuda(const float* h, int hidden, int tokens, int k, const std::int32_t* ids, const float* weights,
                        const std::int32_t* rows, int experts, float* scores, void* stream);
void importance_add_reference(const float* h, int hidden, int tokens, int k, const std::int32_t* ids, const float* weights,
                              const std::int32_t* rows, int experts, float* scores);

// ids [tokens, k] → groups. slots: the layer's slot count; slot s's weights at base + s·stride.
// scratch: 2 · slots ints of device memory.
int reroute_cuda(const std::int32_t* ids, const std::int32_t* rows, int tokens, int k, const std::int32_t* table,
                 int experts, int slots, const bf16_t* base, std::int64_t stride, int* scratch, GroupedPairs out,
                 void* stream);

// mask_router (when `mask`), the router's softmax and top-k (router_topk_cuda) and reroute_cuda in
// one launch of one block, for decode steps of at most kRouteMaxPairs pairs: three launches of
// 2-5 µs each become one. Up to 32 pairs, warp votes group them in place of block-wide scans.
constexpr int kRouteMaxPairs = 1024;
int route_cuda(float* logits, bool mask, bool renormalize, std::int32_t* ids, float* weights, const std::int32_t* rows, int tokens,
               int k, const std::int32_t* table, int experts, int slots, const bf16_t* base, std::int64_t stride, int* scratch,
               GroupedPairs out, void* stream);

// For a decode step of one resident set: its post-attention RMSNorm (h = norm(x), as rms_norm_cuda
// computes it), its router (logits = h · routerᵀ, as linear_cuda computes it) and route_cuda, in one
// launch of one block — three launches become one. At most kNormRouteMaxPairs pairs and kNormRouteMaxExperts
// experts (the block reads the router's E × H weights alone). x, h [tokens, hidden]; logits [tokens, E].
struct NormRouter {
  const bf16_t* norm = nullptr;    // [hidden]
  float eps = 0;
  const bf16_t* router = nullptr;  // [experts, hidden]
  int hidden = 0;
};
constexpr int kNormRouteMaxExperts = 64;
constexpr int kNormRouteMaxPairs = 32;  // tokens · k
int norm_route_cuda(const float* x, const NormRouter& nr, float* h, float* logits, bool mask, bool renormalize, std::int32_t* ids,
                    float* weights, const std::int32_t* rows, int tokens, int k, const std::int32_t* table, int experts, const bf16_t* base,
                    std::int64_t stride, GroupedPairs out, void* stream);

// norm_route_cuda after the attention's output projection into the residual, in one launch:
// x += rows · Wᵀ (+ bias) as linear_cuda accumulates it (rows [tokens, in], W [hidden, in]), over as
// many blocks; the last of them to finish normalizes and routes. h's sums come in another order
// than rms_norm_cuda's (a block of 256 threads), to float rounding. At most kProjectMaxTokens tokens.
// counter: a device unsigned, zero before; the launch leaves it zero.
struct Projection {
  const float* rows = nullptr;
  int in = 0;
  const bf16_t* w = nullptr;
  const bf16_t* bias = nullptr;
  unsigned* counter = nullptr;
};
constexpr int kProjectMaxTokens = 8;
int norm_route_cuda(float* x, const Projection& first, const NormRouter& nr, float* h, float* logits, bool mask, bool renormalize,
                    std::int32_t* ids, float* weights, const std::int32_t* rows, int tokens, int k, const std::int32_t* table, int experts,
                    const bf16_t* base, std::int64_t stride, GroupedPairs out, void* stream);

// The grouped SwiGLU over at most max_groups groups. x [tokens, H]; act [pairs, I]; out [pairs, H].
int expert_gate_up_cuda(const float* x, int hidden, int inter, int k, GroupedPairs g, int max_groups, float* act,
                        void* stream);
int expert_down_cuda(const float* act, int hidden, int inter, GroupedPairs g, int max_groups, float* out, void* stream);
// The same on tensor cores: the inputs (x's rows, then the activations) rounded to bf16 as cuBLAS's
// path reads them, fp32 accumulation; a pass takes a group's positions 32 at a time, so a slot's
// weights are read once for up to 32 rows. H and I multiples of 16 (tensor_core_shapes;
// cudaErrorInvalidValue else). Which of the two serves a step is the backend's choice
// (CudaOptions::tensor_core_experts).
bool tensor_core_shapes(int hidden, int inter);
int expert_gate_up_tc_cuda(const float* x, int hidden, int inter, int k, GroupedPairs g, int max_groups, float* act, void* stream);
int expert_down_tc_cuda(const float* act, int hidden, int inter, GroupedPairs g, int max_groups, float* out, void* stream);
// x [tokens, H] += Σ_j w[t, j] · out[pos_of[t·k + j]].
int moe_combine_cuda(const float* out, const std::int32_t* pos_of, const float* weights, int tokens, int k, int hidden,
                     float* x, void* stream);

// expert_down_cuda, then moe_combine_cuda, for a step of one token (its k pairs) in one launch.
// next: asked of the L2 by the blocks as they finish (the next layer's q, k and v weights).
int expert_down_combine_cuda(const float* act, int hidden, int inter, int k, GroupedPairs g, const float* weights, float* x,
                             void* stream, const L2Prefetch& next = {});

// CPU reference of the whole expert part for one layer, from slots given as host weight blocks:
// slot_of [tokens·k] (−1: unserved); x += Σ_j w · SwiGLU_slot(x).
void moe_experts_reference(const float* x_in, int tokens, int hidden, int inter, int k, const std::int32_t* slot_of,
                           const float* weights, const bf16_t* const* slot_weights, float* x);

}  // namespace mosaic::kernels
