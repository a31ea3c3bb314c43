#include "runtime/model.h"

#include "runtime/cpu_ops.h"

namespace mosaic {

Model::Model(ModelSpec spec, std::unique_ptr<ModelWeights> weights)
    : spec_(std::move(spec)), weights_(std::move(weights)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const Checkpoint& ck) {
  auto w = std::make_unique<ModelWeights>(assemble_weights(ck.spec(), [&](const std::string& name) {
    const Weight& t = ck.weight(name);
    require_finite(t);
    const WeightFloats floats(ck, t);  // a delta folder's expert: base + Δ̂
    at::Tensor w = at::empty(t.info->shape, at::kFloat);
    floats.read(0, std::span(w.data_ptr<float>(), floats.size()));
    return w;
  }, /*with_experts=*/true));
  return std::unique_ptr<Model>(new Model(ck.spec(), std::move(w)));
}

ModelWeights assemble_weights(const ModelSpec& s, const TensorGetter& get, bool with_experts, bool join_mlps) {
  const WeightNames n(s);
  auto mlp = [&](auto name_of) {
    at::Tensor gate = get(name_of(ExpertRole::Gate)), up = get(name_of(ExpertRole::Up)), down = get(name_of(ExpertRole::Down));
    if (join_mlps) return MlpWeights{.gate_up = at::cat({gate, up}, 0), .down = down};
    return MlpWeights{.down = down, .gate = gate, .up = up};
  };

  ModelWeights out;
  out.embed = get(n.embed());
  out.final_norm = get(n.final_norm());
  out.lm_head = s.tie_word_embeddings ? out.embed : get(n.lm_head());
  out.inv_freq = cpu::inverse_frequencies(s);

  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    LayerWeights L;
    L.input_norm = get(n.input_norm(l));
    L.post_norm = get(n.post_norm(l));
    L.wo = get(n.attn(l, AttnPart::O));
    if (s.o_bias) L.bo = get(n.attn(l, AttnPart::O, true));
    if (s.mla) {
      const LatentAttention& a = *s.mla;
      if (a.q_lora_rank > 0) {
        L.wq_a = get(n.mla(l, MlaPart::QA));
        if (s.qkv_bias) L.bq_a = get(n.mla(l, MlaPart::QA, true));
        L.q_a_norm = get(n.mla(l, MlaPart::QANorm));
        L.wq_b = get(n.mla(l, MlaPart::QB));
      } else {
        L.wq = get(n.mla(l, MlaPart::Q));
      }
      L.wkv_a = get(n.mla(l, MlaPart::KVA));
      if (s.qkv_bias) L.bkv_a = get(n.mla(l, MlaPart::KVA, true));
      L.kv_a_norm = get(n.mla(l, MlaPart::KVANorm));
      L.wkv_b = get(n.mla(l, MlaPart::KVB));
      const at::Tensor w = L.wkv_b.view({s.num_heads, a.nope_dim + a.v_dim, a.kv_lora_rank});
      L.w_uk = w.narrow(1, 0, a.nope_dim);
      L.w_uv = w.narrow(1, a.nope_dim, a.v_dim);
    } else {
      L.wq = get(n.attn(l, AttnPart::Q));
      L.wk = get(n.attn(l, AttnPart::K));
      L.wv = get(n.attn(l, AttnPart::V));
      if (s.qkv_bias) {
        L.bq = get(n.attn(l, AttnPart::Q, true));
        L.bk = get(n.attn(l, AttnPart::K, true));
        L.bv = get(n.attn(l, AttnPart::V, true));
      }
    }
    if (s.qk_norm != QkNorm::None) {
      L.q_norm = get(n.q_norm(l));
      L.k_norm = get(n.k_norm(l));
    }
    if (s.is_sparse(l)) {
      L.router = get(n.router(l));
      if (s.router_bias) L.router_bias = get(n.router_bias(l));
      for (std::int64_t e = 0; e < s.num_experts && with_experts; ++e)
        L.experts.push_back(mlp([&](ExpertRole r) { return n.expert(l, e, r); }));
      if (s.shared_expert_intermediate > 0) {
        L.shared = mlp([&](ExpertRole r) { return n.shared_expert(l, r); });
        if (s.shared_expert_gated) L.shared_gate = get(n.shared_expert_gate(l));
      }
    } else {
      L.shared = mlp([&](ExpertRole r) { return n.dense_mlp(l, r); });
    }
    out.layers.push_back(std::move(L));
  }
  return out;
}

}  // namespace mosaic
