#pragma once
// The CPU backend's fp32 weight tensors. Internal: include only from backend .cpp files.
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace mosaic {

struct MlpWeights {
  at::Tensor gate_up;  // [2*I, H]: gate rows then up rows, so one GEMM feeds SwiGLU
  at::Tensor down;     // [H, I]
};

struct LayerWeights {
  at::Tensor input_norm, post_norm;        // [H]
  at::Tensor wq, wk, wv, wo;               // [nh*hd, H], [kvh*hd, H] ×2, [H, nh*hd]
  at::Tensor bq, bk, bv, bo;               // undefined when the model has no such bias
  at::Tensor q_norm, k_norm;               // undefined unless the arch normalizes q/k
  // DeepSeek's latent attention (wq is q_proj when there is no q_lora_rank; wk, wv undefined).
  at::Tensor wq_a, bq_a, q_a_norm, wq_b;   // [rq, H], [rq], [rq], [nh*dq, rq]
  at::Tensor wkv_a, bkv_a, kv_a_norm;      // [rkv+dr, H], [rkv+dr], [rkv]
  at::Tensor wkv_b;                        // [nh*(dn+dv), rkv]
  at::Tensor w_uk, w_uv;                   // views of wkv_b: [nh, dn, rkv] and [nh, dv, rkv] (absorbed decode)
  at::Tensor router;                       // [E, H]; undefined in dense layers
  at::Tensor router_bias;                  // [E]: DeepSeek-V3's e_score_correction_bias; else undefined
  std::vector<MlpWeights> experts;         // [E]; empty in dense layers
  MlpWeights shared;                       // shared expert(s) (Qwen2-MoE, DeepSeek) or dense MLP; else undefined
  at::Tensor shared_gate;                  // [1, H]; undefined unless the shared expert is gated (Qwen2-MoE)
};

struct ModelWeights {
  at::Tensor embed;       // [V, H]
  at::Tensor final_norm;  // [H]
  at::Tensor lm_head;     // [V, H] (the embedding itself when tied)
  at::Tensor inv_freq;    // [rope_dim/2] rotary frequencies, as transformers computes them
  std::vector<LayerWeights> layers;
};

// A model's fp32 weights from a lookup by tensor name (a checkpoint, or a host-store set); the routed
// experts only when asked (a device's non-expert set leaves them to the slots).
using TensorGetter = std::function<at::Tensor(const std::string& name)>;
ModelWeights assemble_weights(const ModelSpec& spec, const TensorGetter& get, bool with_experts);

}  // namespace mosaic
