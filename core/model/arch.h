#pragma once
// Per-architecture facts, kept in one table rather than in branches through the forward pass:
// the model_type string, tensor-name fragments, and the config defaults of transformers' classes.
#include <span>
#include <string_view>

namespace mosaic {

enum class Arch { Mixtral, Qwen2Moe, Qwen3Moe, Olmoe, DeepseekV2, DeepseekV3 };
enum class QkNorm { None, Whole, PerHead };  // RMSNorm over all of q/k (OLMoE) or per head (Qwen3)

struct ArchInfo {
  Arch arch;
  std::string_view model_type;
  // Tensor names below "model.layers.N.".
  std::string_view moe_prefix;     // holds the router ("gate") and the experts
  std::string_view expert_gate, expert_up, expert_down;
  // Semantics fixed by the architecture.
  QkNorm qk_norm;
  bool always_norm_topk;            // Mixtral renormalizes top-k weights unconditionally
  bool has_shared_expert;
  std::string_view shared_expert_prefix;  // below "model.layers.N.": Qwen2's one shared expert, DeepSeek's fused ones
  bool shared_expert_gated;               // Qwen2-MoE scales it by a sigmoid gate; DeepSeek adds it as is
  bool qkv_bias_default;            // Qwen2-MoE: q/k/v biases unless the config says otherwise
  bool latent_attention;            // DeepSeek's multi-head latent attention (MLA) instead of q/k/v/o
  // transformers' config defaults for optional fields.
  double default_rms_eps, default_rope_theta;
  long default_max_positions;
  // The spellings of the expert count: what the architecture's hub checkpoints write first, then
  // the other one transformers accepts (5.x writes num_local_experts where 4.x wrote num_experts).
  std::string_view experts_key, experts_alias;
};

const ArchInfo* find_arch(std::string_view model_type);  // nullptr if unsupported
const ArchInfo& arch_info(Arch arch);
std::span<const ArchInfo> supported_archs();

}  // namespace mosaic
