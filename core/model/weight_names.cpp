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

std::string WeightNames::router(std::int64_t l) const { return layer(l) + std::string(arch_.moe_prefix) + "gate.weight"; }

std::string WeightNames::expert(std::int64_t l, std::int64_t e, ExpertRole r) const {
  return layer(l) + std::string(arch_.moe_prefix) + "experts." + std::to_string(e) + "." + role_name(r, arch_, true) + ".weight";
}

std::string WeightNames::shared_expert(std::int64_t l, ExpertRole r) const {
  return layer(l) + "mlp.shared_expert." + role_name(r, arch_, false) + ".weight";
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
    add(n.post_norm(l), {H}, l);
    if (s.is_sparse(l)) {
      add(n.router(l), {s.num_experts, H}, l);
      for (std::int64_t e = 0; e < s.num_experts; ++e)
        add_mlp(l, s.expert_intermediate, [&](ExpertRole r) { return n.expert(l, e, r); }, e);
      if (s.shared_expert_intermediate > 0) {
        add_mlp(l, s.shared_expert_intermediate, [&](ExpertRole r) { return n.shared_expert(l, r); }, -1);
        add(n.shared_expert_gate(l), {1, H}, l);
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
