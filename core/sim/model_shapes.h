#pragma once
// What a model's step reads and computes, from its config alone: parameter counts per part, from
// the same tensor table a checkpoint is checked against (model/weight_names.h), and the bytes they
// take as stored. Lets the cost model price Mixtral-8x7B without its 90 GB of weights.
#include <cstdint>
#include <filesystem>

#include "model/model_spec.h"

namespace mosaic {

struct ModelShapes {
  ModelSpec spec;
  std::size_t stored_bytes = 2;        // per weight element in host memory (the checkpoint's dtype)
  std::uint64_t non_expert_params = 0; // one variant's non-expert tensors (a resident set)
  std::uint64_t expert_params = 0;     // one routed expert (gate, up, down)
  // Per decoder layer, what every token goes through.
  std::uint64_t attention_params = 0;  // q, k, v, o (and their biases)
  std::uint64_t router_params = 0;     // MoE layers
  std::uint64_t shared_params = 0;     // MoE layers with a shared expert (and its gate)
  std::uint64_t dense_params = 0;      // dense-MLP layers
  std::uint64_t head_params = 0;       // lm_head (the embedding when tied)

  std::uint64_t non_expert_bytes() const { return non_expert_params * stored_bytes; }
  std::uint64_t expert_bytes() const { return expert_params * stored_bytes; }
};

ModelShapes model_shapes(const ModelSpec& spec, std::size_t stored_bytes);

// A folder's config.json read for its shapes only: no weights need exist. The stored dtype is the
// config's torch_dtype (transformers 4.x) or dtype (5.x); "auto" or absent counts as bf16. Throws
// what load_model_spec throws.
ModelShapes load_model_shapes(const std::filesystem::path& config_json);

}  // namespace mosaic
