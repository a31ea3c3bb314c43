#pragma once
// ModelSpec: everything the engine needs from a checkpoint's config.json, with the exact
// semantics of transformers' implementation of each supported model_type.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/arch.h"

namespace mosaic {

// DeepSeek's multi-head latent attention: keys and values come from one compressed latent per token
// (what the KV cache holds, with the one rotary key all heads share), queries optionally through a
// low-rank pair. Per head, the query and key are [nope_dim | rope_dim]; the value is v_dim.
struct LatentAttention {
  std::int64_t q_lora_rank = 0;  // 0: a plain q_proj
  std::int64_t kv_lora_rank = 0;
  std::int64_t nope_dim = 0, rope_dim = 0, v_dim = 0;
  bool operator==(const LatentAttention&) const = default;
};

// How rotary frequencies are scaled for long contexts (transformers' modeling_rope_utils.py).
enum class RopeKind { Default, Yarn, Llama3 };
struct RopeScaling {
  RopeKind kind = RopeKind::Default;
  double factor = 1.0;
  std::int64_t original_max_positions = 0;
  double beta_fast = 32, beta_slow = 1;           // yarn
  bool truncate = true;                            // yarn: the correction range floored and ceiled
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  double mscale = 0, mscale_all_dim = 0;           // yarn, as the config gives them (0: absent)
  double attention_factor = 1.0;                   // yarn: multiplies cos and sin
  bool operator==(const RopeScaling&) const = default;
};

// How a token's experts are chosen from the router's logits.
enum class RouterScoring { Softmax, Sigmoid };  // DeepSeek-V3: sigmoid scores
enum class ExpertChoice {
  TopK,          // the k best
  GroupMax,      // DeepSeek-V2 group_limited_greedy: the k best within the topk_group groups of highest max
  GroupTopTwo,   // DeepSeek-V3 noaux_tc: groups ranked by the sum of their two best biased scores
};

struct ModelSpec {
  Arch arch = Arch::Mixtral;
  std::int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  std::int64_t num_experts = 0, top_k = 0;
  bool norm_topk_prob = false;               // renormalize the top-k router weights to sum to 1
  std::int64_t expert_intermediate = 0;      // SwiGLU width of one routed expert
  std::int64_t dense_intermediate = 0;       // width of dense-MLP layers (0 when none exist)
  std::int64_t shared_expert_intermediate = 0;  // 0: no shared expert (DeepSeek: its shared experts fused)
  bool shared_expert_gated = true;           // Qwen2-MoE's sigmoid gate; DeepSeek adds its shared experts as they are
  RouterScoring router_scoring = RouterScoring::Softmax;
  ExpertChoice expert_choice = ExpertChoice::TopK;
  std::int64_t n_group = 1, topk_group = 1;  // GroupMax / GroupTopTwo
  double routed_scaling_factor = 1.0;        // multiplies the routed experts' weights (DeepSeek)
  bool router_bias = false;                  // DeepSeek-V3: e_score_correction_bias, for choosing only
  std::optional<LatentAttention> mla;        // DeepSeek's attention; q/k/v/o projections otherwise
  std::int64_t mtp_layers = 0;               // DeepSeek-V3's multi-token-prediction layers after the last: stored, unused
  // A quantized release's quantization_config.quant_method ("fp8", "gptq", …; "unnamed" without one),
  // empty for unquantized weights: a Checkpoint refuses it, the simulated clock needs only shapes.
  std::string quantization;
  bool qkv_bias = false, o_bias = false;
  QkNorm qk_norm = QkNorm::None;
  std::optional<double> clip_qkv;            // OLMoE: clamp q, k, v to ±clip_qkv
  double rope_theta = 10000.0, rms_norm_eps = 1e-6;
  RopeScaling rope_scaling;
  bool rope_interleaved = false;             // rotate pairs (2i, 2i+1), as DeepSeek's weights are laid out, not (i, i+d/2)
  double attention_mscale = 1.0;             // multiplies the softmax scale 1/√head_dim (DeepSeek's yarn mscale²)
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::vector<bool> sparse_layers;           // per layer: MoE block (true) or dense MLP
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;

  std::string_view model_type() const;
  bool is_sparse(std::int64_t layer) const { return sparse_layers[static_cast<std::size_t>(layer)]; }
  std::int64_t num_sparse_layers() const;
  std::int64_t q_width() const { return num_heads * head_dim; }     // query (and, MLA: key) width of all heads
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }
  std::int64_t o_width() const { return mla ? num_heads * mla->v_dim : q_width(); }  // the output projection's input
  std::int64_t rope_dim() const { return mla ? mla->rope_dim : head_dim; }          // dimensions the rotary embedding turns
  // Values the KV cache holds per token and layer: keys and values, or MLA's latent and rotary key.
  std::int64_t kv_cache_width() const { return mla ? mla->kv_lora_rank + mla->rope_dim : 2 * kv_width(); }
  double softmax_scale() const;
};

// Parses config.json text; `source` names the file in errors. Throws FormatError (bad JSON or
// values), MissingError (a required field), UnsupportedError (a model_type or option not implemented).
ModelSpec parse_model_spec(std::string_view config_text, const std::string& source);
ModelSpec load_model_spec(const std::filesystem::path& config_json);

// The config.json transformers would write for this spec (for synthetic checkpoints).
std::string to_config_json(const ModelSpec& spec);

// The first field in which two specs differ, as "field: a vs b"; nullopt when identical.
std::optional<std::string> first_difference(const ModelSpec& a, const ModelSpec& b);

}  // namespace mosaic
