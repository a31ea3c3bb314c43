#pragma once
// Internal (ATen): the CPU backend's fp32 building blocks, shared by the single-model reference
// forward pass and the batched step so that both compute the same numbers the same way. Include only
// from backend .cpp files.
#include <ATen/ATen.h>

#include "runtime/cpu_weights.h"
#include "runtime/host_store.h"

namespace mosaic::cpu {

// transformers' RMSNorm over the last dim: w * (x * rsqrt(mean(x²) + eps)).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);
// x · wᵀ (+ b).
at::Tensor affine(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});
// The same for the batched step's 2-D activations: few rows go through skinny_gemm (cpu_gemm.h).
at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});
// project() of one x by several weights (each with its bias, or none), bit for bit, with every
// product's rows split over the threads together: one parallel region, not one per weight (k and v
// beside q: alone, each is too small to keep the threads streaming).
std::vector<at::Tensor> project_each(const at::Tensor& x, const std::vector<std::pair<at::Tensor, at::Tensor>>& weights);
// The attention inputs as transformers computes them before rotary: q, k, v projected, OLMoE's norm
// over the whole projection and its clip, the head split (h [..., H] → [..., heads, hd]), Qwen3's
// per-head norm. `batched`: projections through project().
struct HeadsQkv {
  at::Tensor q, k, v;
};
HeadsQkv project_heads(const ModelSpec& s, const LayerWeights& L, const at::Tensor& h, bool batched);
// DeepSeek's latent attention before rotary: the query's two parts per head ([..., nh, nope] and
// [..., nh, rope]), the normalized latent ([..., kv_lora_rank]) and the one rotary key all heads share
// ([..., rope]). `batched`: projections through project().
struct LatentQkv {
  at::Tensor q_nope, q_pe, latent, k_pe;
};
LatentQkv project_latent(const ModelSpec& s, const LayerWeights& L, const at::Tensor& h, bool batched);
// Rotary embedding with transformers' non-interleaved halves; cos/sin broadcast against x.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// The same turning pairs (2i, 2i+1), as DeepSeek's weights are laid out; the result interleaved too.
at::Tensor rope_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// The architecture's rotary layout (ModelSpec::rope_interleaved).
at::Tensor rotate(const ModelSpec& s, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// Each token's experts as the architecture chooses them from the router's logits [n, E]: softmax or
// sigmoid scores; the k best, or the k best within the best groups (DeepSeek; V3 choosing with
// `bias` added, weighing without it); renormalized where the model says so and scaled by
// routed_scaling_factor. `absent` ([n, E] bool, or undefined): experts no token may choose (masked
// gating). Weights [n, k] fp32, ids [n, k] int64, both contiguous.
struct Routed {
  at::Tensor weights, ids;
};
Routed route_tokens(const ModelSpec& s, const at::Tensor& logits, const at::Tensor& bias = {}, const at::Tensor& absent = {});
// SwiGLU MLP: down(silu(gate(x)) * up(x)), gate and up stacked in one weight.
// `batched`: the projections go through project() (the batched step), else affine() (the reference).
// x · [gate; up]ᵀ, [n, 2I], whether the MLP holds gate_up joined or gate and up apart.
at::Tensor gate_up_product(const at::Tensor& x, const MlpWeights& m, bool batched = false);
at::Tensor swiglu(const at::Tensor& x, const MlpWeights& m, bool batched = false);
// out[rows] += weights · SwiGLU_m(x[rows]): one expert over the tokens routed to it.
void add_expert(const at::Tensor& x, const std::vector<std::int64_t>& rows, const std::vector<float>& weights,
                const MlpWeights& m, at::Tensor& out, bool batched = false);
// Grouped-query attention of one sequence without copying keys (query head h reads kv head h / rep):
// q [nh, T, dk] after rotary, k [kvh, S, dk] and v [kvh, S, dv]; query i sits at position S − T + i and
// sees keys 0 … S − T + i; scores scaled by `scale`. Returns [T, nh·dv].
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);
// Rotary cos and sin for the given positions: [P, rope_dim] each, times `attention_factor` (YaRN's).
std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& positions, const at::Tensor& inv_freq, double attention_factor = 1.0);
// transformers' inverse frequencies: 1 / θ^(2i/d) in fp32 as it computes them, or scaled (model/rope.h).
at::Tensor inverse_frequencies(const ModelSpec& spec);

// An owned fp32 copy of a tensor held in any floating dtype (mapped or host-store bytes).
at::Tensor to_fp32(const std::byte* data, DType dtype, const std::vector<std::int64_t>& shape);
at::ScalarType aten_type(DType dtype);  // a stored floating dtype as ATen's

}  // namespace mosaic::cpu
