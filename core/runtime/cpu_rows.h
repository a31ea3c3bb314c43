#pragma once
// Internal (ATen): the batched step's row-wise work as plain loops over fp32 rows — RMSNorm, rotary
// over halves, an expert's gather, gate and scatter, the finite check — where LibTorch's ops cost far more in dispatch and allocation than
// they compute at a decode step's few rows (RMSNorm over one row of 1024: ~70 µs as six ops, ~1 µs
// here). The same formulas as cpu_ops.h's, which the reference forward keeps as the oracle; the
// results agree to float rounding, not bit for bit. Anything but contiguous fp32 falls back to those.
#include <ATen/ATen.h>

#include <vector>

#include "model/model_spec.h"
#include "runtime/cpu_weights.h"

namespace mosaic::cpu {

// w · (x · rsqrt(mean(x²) + eps)) over the last dim of x.
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& w, double eps);
// The architecture's rotary (cpu_ops.h rotate) of x [n, heads, d] by cos, sin [n, d].
at::Tensor rotate_rows(const ModelSpec& s, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// silu(gate) · up of gu [n, 2I] (gate then up, as gate_up_product gives them): [n, I].
at::Tensor gate_rows(const at::Tensor& gu);
// out[rows[i]] += weights[i] · down(silu(gate(x[rows[i]])) · up(x[rows[i]])): cpu_ops.h's add_expert
// for the batched step, its gather, gate and weighted scatter as loops (projections through project()).
void add_expert_rows(const at::Tensor& x, const std::vector<std::int64_t>& rows, const std::vector<float>& weights, const MlpWeights& m,
                     at::Tensor& out);
// route_tokens' choice (cpu_ops.h) written to ids and weights ([n, k] each, row-major): softmax
// scores and the k best (Mixtral, Qwen-MoE, OLMoE) as a loop per token, ties to the lower expert id;
// other scorings and group-limited choices through route_tokens.
void route_rows(const ModelSpec& s, const at::Tensor& logits, const at::Tensor& bias, const at::Tensor& absent, std::int64_t* ids, float* weights);
// Whether every value of x is finite.
bool all_finite(const at::Tensor& x);

}  // namespace mosaic::cpu
