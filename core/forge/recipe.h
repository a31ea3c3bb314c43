#pragma once
// A forge recipe (mosaic.forge/1 JSON): the domains, the tokenizer, the model and the training
// schedule of a sample family. See sample_configs/forge-sample.json.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "forge/corpus.h"
#include "forge/moe_trainer.h"
#include "model/model_spec.h"

namespace mosaic {

struct StageConfig {
  std::int64_t steps = 0;
  OptimizerConfig opt;
};

struct EsftConfig {
  std::string criterion = "gate";  // "gate" (mean router probability) or "token" (selection ratio)
  double threshold = 0.2;          // per layer, experts by relevance until their share reaches this
  std::int64_t stats_batches = 8;  // batches of domain text the relevance is measured on
  StageConfig stage;
};

struct ForgeRecipe {
  std::filesystem::path output, work_dir;  // relative paths are relative to the current folder
  std::uint64_t seed = 1;
  std::int64_t vocab_size = 1024, tokenizer_sample_bytes = 2'000'000;
  ModelSpec spec;
  std::int64_t seq_len = 128, batch = 16, save_every = 50, log_every = 10, eval_windows = 32;
  StageConfig base, finetune;
  EsftConfig esft;
  std::vector<DomainSpec> domains;
  std::string text;  // the recipe file as read: a resumed run must use the same
};

// Throws IoError, FormatError (bad JSON, a field of the wrong type or out of range, naming it).
ForgeRecipe load_recipe(const std::filesystem::path& file);
ForgeRecipe parse_recipe(const std::string& text, const std::string& source);

}  // namespace mosaic
