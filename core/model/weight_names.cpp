#include "model/weight_names.h"

namespace mosaic {
namespace {
const char* role_name(ExpertRole r, const ArchInfo& a, bool arch_names) {
  if (arch_names) return r == ExpertRole::Gate ? a.expert_gate.data() : r == ExpertRole::Up ? a.expert_up.data() : a.expert_down.data();
  return r == ExpertRole::Gate ? "gate_proj" : r == ExpertRole::Up ? "up_proj" : "down_proj";
}
}  // namespace

WeightNames::WeightNames(const ModelSpec& spec) : spec_(spec), arch_(arch_info(spec.arch)) {}

std::string WeightNames::lm_head() const { return spec_.tie_word_embeddings ? embed() : "lm_head.weight"; }

std::string WeightNames::attn(std::int64_t l, AttnPart p, bool bias) const {
  static constexpr const char* kParts[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return layer(l) + "self_attn." + kParts[static_cast<int>(p)] + (bias ? ".bias" : ".weight");
}

std::string WeightNames::mla(std::int64_t l, MlaPart p, bool bias) const {
  static constexpr const char* kParts[] = {"q_a_proj", "q_a_layernorm", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj"};
  return layer(l) + "self_attn." + kParts[static_cast<int>(p)] + (bias ? ".bias" : ".weight");
}

std::string WeightNames::router(std::int64_t l) const { return layer(l) + std::string(arch_.moe_prefix) + "gate.weight"; }
std::string WeightNames::router_bias(std::int64_t l) const {
  return layer(l) + std::string(arch_.moe_prefix) + "gate.e_score_correction_bias";
}

std::int64_t WeightNames::layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (!name.starts_with(prefix)) return -1;
  std::int64_t l = 0;
  std::size_t i = prefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && l < (std::int64_t{1} << 40); ++i) l = l * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? l : -1;
}

std::string WeightNames::expert(std::int64_t l, std::int64_t e, ExpertRole r) const {
  return layer(l) + std::string(arch_.moe_prefix) + "experts." + std::to_string(e) + "." + role_name(r, arch_, true) + ".weight";
}

std::string WeightNames::shared_expert(std::int64_t l, ExpertRole r) const {
  return layer(l) + std::string(arch_.shared_expert_prefix) + role_name(r, arch_, false) + ".weight";
}

std::string WeightNames::dense_mlp(std::int64_t l, ExpertRole r) const {
  return layer(l) + "mlp." + role_name(r, arch_, false) + ".weight";
}

std::vector<ExpectedTensor> expected_tensors(const ModelSpec& s) {
  const WeightNames n(s);
  const std::int64_t H = s.hidden_size;
  std::vector<ExpectedTensor> out;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, std::int64_t layer = -1) {
    out.push_back({std::move(name), std::move(shape), layer});
  };
  auto add_mlp = [&](std::int64_t l, std::int64_t width, auto name_of, std::int64_t expert) {
    for (ExpertRole r : {ExpertRole::Gate, ExpertRole::Up, ExpertRole::Down}) {
      std::vector<std::int64_t> shape = r == ExpertRole::Down ? std::vector<std::int64_t>{H, width}
                                                              : std::vector<std::int64_t>{width, H};
      out.push_back({name_of(r), std::move(shape), l, expert, r});
    }
  };

  add(n.embed(), {s.vocab_size, H});
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    add(n.input_norm(l), {H}, l);
    if (s.mla) {
      const LatentAttention& a = *s.mla;
      if (a.q_lora_rank > 0) {
        add(n.mla(l, MlaPart::QA), {a.q_lora_rank, H}, l);
        if (s.qkv_bias) add(n.mla(l, MlaPart::QA, true), {a.q_lora_rank}, l);
        add(n.mla(l, MlaPart::QANorm), {a.q_lora_rank}, l);
        add(n.mla(l, MlaPart::QB), {s.q_width(), a.q_lora_rank}, l);
      } else {
        add(n.mla(l, MlaPart::Q), {s.q_width(), H}, l);
      }
      add(n.mla(l, MlaPart::KVA), {a.kv_lora_rank + a.rope_dim, H}, l);
      if (s.qkv_bias) add(n.mla(l, MlaPart::KVA, true), {a.kv_lora_rank + a.rope_dim}, l);
      add(n.mla(l, MlaPart::KVANorm), {a.kv_lora_rank}, l);
      add(n.mla(l, MlaPart::KVB), {s.num_heads * (a.nope_dim + a.v_dim), a.kv_lora_rank}, l);
      add(n.attn(l, AttnPart::O), {H, s.o_width()}, l);
      if (s.o_bias) add(n.attn(l, AttnPart::O, true), {H}, l);
    } else {
    add(n.attn(l, AttnPart::Q), {s.q_width(), H}, l);
    add(n.attn(l, AttnPart::K), {s.kv_width(), H}, l);
    add(n.attn(l, AttnPart::V), {s.kv_width(), H}, l);
    add(n.attn(l, AttnPart::O), {H, s.q_width()}, l);
    if (s.qkv_bias) {
      add(n.attn(l, AttnPart::Q, true), {s.q_width()}, l);
      add(n.attn(l, AttnPart::K, true), {s.kv_width()}, l);
      add(n.attn(l, AttnPart::V, true), {s.kv_width()}, l);
    }
    if (s.o_bias) add(n.attn(l, AttnPart::O, true), {H}, l);
    if (s.qk_norm == QkNorm::Whole) {
      add(n.q_norm(l), {s.q_width()}, l);
      add(n.k_norm(l), {s.kv_width()}, l);
    } else if (s.qk_norm == QkNorm::PerHead) {
      add(n.q_norm(l), {s.head_dim}, l);
      add(n.k_norm(l), {s.head_dim}, l);
    }
    }
    add(n.post_norm(l), {H}, l);
    if (s.is_sparse(l)) {
      add(n.router(l), {s.num_experts, H}, l);
      if (s.router_bias) add(n.router_bias(l), {s.num_experts}, l);
      for (std::int64_t e = 0; e < s.num_experts; ++e)
        add_mlp(l, s.expert_intermediate, [&](ExpertRole r) { return n.expert(l, e, r); }, e);
      if (s.shared_expert_intermediate > 0) {
        add_mlp(l, s.shared_expert_intermediate, [&](ExpertRole r) { return n.shared_expert(l, r); }, -1);
        if (s.shared_expert_gated) add(n.shared_expert_gate(l), {1, H}, l);
      }
    } else {
      add_mlp(l, s.dense_intermediate, [&](ExpertRole r) { return n.dense_mlp(l, r); }, -1);
    }
  }
  add(n.final_norm(), {H});
  if (!s.tie_word_embeddings) add(n.lm_head(), {s.vocab_size, H});
  return out;
}

}  // namespace mosaic
