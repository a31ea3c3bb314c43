#pragma once
// Names and shapes of every tensor a checkpoint of a ModelSpec must hold, and which weight group
// each belongs to: non-expert (swapped per request) or expert (layer, expert, role).
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace mosaic {

enum class ExpertRole { Gate, Up, Down };
enum class AttnPart { Q, K, V, O };
// DeepSeek's latent attention: q_proj, or q_a_proj → q_a_layernorm → q_b_proj; kv_a_proj_with_mqa →
// kv_a_layernorm → kv_b_proj (and o_proj, AttnPart::O).
enum class MlaPart { QA, QANorm, QB, Q, KVA, KVANorm, KVB };

class WeightNames {
 public:
  explicit WeightNames(const ModelSpec& spec);

  std::string embed() const { return "model.embed_tokens.weight"; }
  std::string final_norm() const { return "model.norm.weight"; }
  std::string lm_head() const;  // the embedding when tied
  std::string input_norm(std::int64_t l) const { return layer(l) + "input_layernorm.weight"; }
  std::string post_norm(std::int64_t l) const { return layer(l) + "post_attention_layernorm.weight"; }
  std::string attn(std::int64_t l, AttnPart p, bool bias = false) const;
  std::string q_norm(std::int64_t l) const { return layer(l) + "self_attn.q_norm.weight"; }
  std::string k_norm(std::int64_t l) const { return layer(l) + "self_attn.k_norm.weight"; }
  std::string mla(std::int64_t l, MlaPart p, bool bias = false) const;
  std::string router(std::int64_t l) const;
  std::string router_bias(std::int64_t l) const;  // DeepSeek-V3's e_score_correction_bias
  std::string expert(std::int64_t l, std::int64_t e, ExpertRole r) const;
  std::string shared_expert(std::int64_t l, ExpertRole r) const;
  std::string shared_expert_gate(std::int64_t l) const { return layer(l) + "mlp.shared_expert_gate.weight"; }
  // The decoder layer a tensor name belongs to ("model.layers.N." → N); -1 for none.
  static std::int64_t layer_of(const std::string& name);
  std::string dense_mlp(std::int64_t l, ExpertRole r) const;

 private:
  static std::string layer(std::int64_t l) { return "model.layers." + std::to_string(l) + "."; }
  const ModelSpec& spec_;
  const ArchInfo& arch_;
};

struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t layer = -1;   // -1: not inside a decoder layer
  std::int64_t expert = -1;  // -1: non-expert weight
  ExpertRole role = ExpertRole::Gate;  // meaningful for experts only
  bool is_expert() const { return expert >= 0; }
};

// Every tensor the spec requires, in a stable order (embeddings, layers in order, head).
std::vector<ExpectedTensor> expected_tensors(const ModelSpec& spec);

}  // namespace mosaic
