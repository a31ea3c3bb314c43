#include "sim/model_shapes.h"

#include <nlohmann/json.hpp>

#include "common/text_file.h"
#include "model/weight_names.h"

namespace mosaic {

ModelShapes model_shapes(const ModelSpec& spec, std::size_t stored_bytes) {
  ModelShapes m;
  m.spec = spec;
  m.stored_bytes = stored_bytes;
  const WeightNames names(spec);
  const std::string head = names.lm_head();
  for (const ExpectedTensor& t : expected_tensors(spec)) {
    std::uint64_t n = 1;
    for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
    if (t.is_expert()) continue;
    m.non_expert_params += n;
    if (t.name == head) m.head_params = n;
  }
  if (spec.tie_word_embeddings) m.head_params = static_cast<std::uint64_t>(spec.vocab_size * spec.hidden_size);
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const std::uint64_t h = u(spec.hidden_size);
  // One layer's attention weights as the checkpoint holds them: q/k/v/o with their biases and q/k
  // norms, or latent attention's down and up projections and norms.
  for (const ExpectedTensor& t : expected_tensors(spec))
    if (t.layer == 0 && t.name.find(".self_attn.") != std::string::npos) {
      std::uint64_t n = 1;
      for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
      m.attention_params += n;
    }
  m.expert_params = 3 * h * u(spec.expert_intermediate);
  m.router_params = h * u(spec.num_experts);
  if (spec.shared_expert_intermediate > 0) m.shared_params = 3 * h * u(spec.shared_expert_intermediate) + (spec.shared_expert_gated ? h : 0);
  m.dense_params = 3 * h * u(spec.dense_intermediate);
  return m;
}

ModelShapes load_model_shapes(const std::filesystem::path& config_json) {
  const ModelSpec spec = load_model_spec(config_json);
  const auto j = nlohmann::json::parse(read_text_file(config_json), nullptr, false);
  std::size_t bytes = 2;
  for (const char* key : {"torch_dtype", "dtype"})
    if (j.is_object() && j.contains(key) && j[key].is_string() && (j[key] == "float32" || j[key] == "float")) bytes = 4;
  return model_shapes(spec, bytes);
}

}  // namespace mosaic
