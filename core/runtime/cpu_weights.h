#pragma once
// The CPU backend's weight tensors (fp32, or bf16 as stored). Internal: include only from backend .cpp files.
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace mosaic {

struct MlpWeights {
  at::Tensor gate_up;  // [2*I, H]: gate rows then up rows, so one GEMM feeds SwiGLU
  at::Tensor down;     // [H, I]
  // Apart instead of gate_up (undefined then): the checkpoint's own tensors, where the CPU backend
  // reads them in place (CpuWeights::Mapped) and joining them would copy.
  at::Tensor gate, up;  // [I, H] each
  bool defined() const { return down.defined(); }
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

// A model's weights from a lookup by tensor name (a checkpoint, or a host-store set); the routed
// experts only when asked (a device's non-expert set leaves them to the slots). `join_mlps`: each
// MLP's gate and up as one gate_up (a copy); else apart, as the lookup returned them.
using TensorGetter = std::function<at::Tensor(const std::string& name)>;
ModelWeights assemble_weights(const ModelSpec& spec, const TensorGetter& get, bool with_experts, bool join_mlps = true);

}  // namespace mosaic
