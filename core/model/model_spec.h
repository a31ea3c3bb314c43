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

struct ModelSpec {
  Arch arch = Arch::Mixtral;
  std::int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  std::int64_t num_experts = 0, top_k = 0;
  bool norm_topk_prob = false;               // renormalize the top-k router weights to sum to 1
  std::int64_t expert_intermediate = 0;      // SwiGLU width of one routed expert
  std::int64_t dense_intermediate = 0;       // width of dense-MLP layers (0 when none exist)
  std::int64_t shared_expert_intermediate = 0;  // 0: no shared expert
  bool qkv_bias = false, o_bias = false;
  QkNorm qk_norm = QkNorm::None;
  std::optional<double> clip_qkv;            // OLMoE: clamp q, k, v to ±clip_qkv
  double rope_theta = 10000.0, rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::vector<bool> sparse_layers;           // per layer: MoE block (true) or dense MLP
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;

  std::string_view model_type() const;
  bool is_sparse(std::int64_t layer) const { return sparse_layers[static_cast<std::size_t>(layer)]; }
  std::int64_t num_sparse_layers() const;
  std::int64_t q_width() const { return num_heads * head_dim; }
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }
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
