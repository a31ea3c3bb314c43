#include "runtime/model.h"

#include "runtime/cpu_weights.h"

namespace mosaic {
namespace {

at::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::BF16: return at::kBFloat16;
    case DType::F16: return at::kHalf;
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    default: return at::kFloat;  // Checkpoint admits floating weights only
  }
}

// An owned fp32 copy of a mapped tensor (the map may be unaligned and must never be written).
at::Tensor to_fp32(const Weight& w) {
  auto* p = const_cast<std::byte*>(w.data().data());
  return at::from_blob(p, w.info->shape, at::TensorOptions().dtype(scalar_type(w.dtype)))
      .to(at::kFloat, /*non_blocking=*/false, /*copy=*/true)
      .contiguous();
}

}  // namespace

Model::Model(ModelSpec spec, std::unique_ptr<ModelWeights> weights)
    : spec_(std::move(spec)), weights_(std::move(weights)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const Checkpoint& ck) {
  const ModelSpec& s = ck.spec();
  const WeightNames n(s);
  auto get = [&](const std::string& name) { return to_fp32(ck.weight(name)); };
  auto mlp = [&](auto name_of) {
    return MlpWeights{at::cat({get(name_of(ExpertRole::Gate)), get(name_of(ExpertRole::Up))}, 0),
                      get(name_of(ExpertRole::Down))};
  };

  auto w = std::make_unique<ModelWeights>();
  w->embed = get(n.embed());
  w->final_norm = get(n.final_norm());
  w->lm_head = s.tie_word_embeddings ? w->embed : get(n.lm_head());
  // transformers: 1 / theta^(arange(0, d, 2) / d) in fp32.
  w->inv_freq = 1.0 / at::pow(s.rope_theta, at::arange(0, s.head_dim, 2, at::kLong).to(at::kFloat) / s.head_dim);
  w->inv_freq = w->inv_freq.to(at::kFloat);

  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    LayerWeights L;
    L.input_norm = get(n.input_norm(l));
    L.post_norm = get(n.post_norm(l));
    L.wq = get(n.attn(l, AttnPart::Q));
    L.wk = get(n.attn(l, AttnPart::K));
    L.wv = get(n.attn(l, AttnPart::V));
    L.wo = get(n.attn(l, AttnPart::O));
    if (s.qkv_bias) {
      L.bq = get(n.attn(l, AttnPart::Q, true));
      L.bk = get(n.attn(l, AttnPart::K, true));
      L.bv = get(n.attn(l, AttnPart::V, true));
    }
    if (s.o_bias) L.bo = get(n.attn(l, AttnPart::O, true));
    if (s.qk_norm != QkNorm::None) {
      L.q_norm = get(n.q_norm(l));
      L.k_norm = get(n.k_norm(l));
    }
    if (s.is_sparse(l)) {
      L.router = get(n.router(l));
      for (std::int64_t e = 0; e < s.num_experts; ++e)
        L.experts.push_back(mlp([&](ExpertRole r) { return n.expert(l, e, r); }));
      if (s.shared_expert_intermediate > 0) {
        L.shared = mlp([&](ExpertRole r) { return n.shared_expert(l, r); });
        L.shared_gate = get(n.shared_expert_gate(l));
      }
    } else {
      L.shared = mlp([&](ExpertRole r) { return n.dense_mlp(l, r); });
    }
    w->layers.push_back(std::move(L));
  }
  return std::unique_ptr<Model>(new Model(s, std::move(w)));
}

}  // namespace mosaic
