#pragma once
// Trains a Mixtral-architecture MoE with LibTorch's autograd on the CPU: the same model, tensor
// names and semantics the runtime serves, so a trained checkpoint loads like any HF one.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/checkpoint.h"
#include "model/dtype.h"
#include "model/model_spec.h"
#include "model/weight_names.h"

namespace mosaic {

struct OptimizerConfig {  // AdamW with linear warmup and cosine decay
  double lr = 3e-3, min_lr_fraction = 0.1, weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  std::int64_t warmup_steps = 50;
  double aux_loss_coef = 0.01;  // Switch-style load balancing, so that every expert is used
};
double learning_rate(const OptimizerConfig& c, std::int64_t step, std::int64_t total_steps);

// Per MoE layer and expert, over the tokens seen: the mean router probability (ESFT-Gate's
// relevance) and the fraction of tokens that selected the expert among their top-k (ESFT-Token's).
struct RouterStats {
  std::vector<std::vector<double>> gate_score, token_ratio;  // [layer][expert]
};

using TensorFilter = std::function<bool(const ExpectedTensor&)>;

class MoeTrainer {
 public:
  // Weights ~ N(0, 0.02²), output projections scaled by 1/√(2·layers), norms 1. Mixtral only:
  // throws UnsupportedError for another architecture.
  static std::unique_ptr<MoeTrainer> fresh(const ModelSpec& spec, std::uint64_t seed, const OptimizerConfig& opt);
  static std::unique_ptr<MoeTrainer> from_checkpoint(const Checkpoint& ck, const OptimizerConfig& opt);
  ~MoeTrainer();

  const ModelSpec& spec() const;
  // Only tensors passing `trainable` get gradients and updates (ESFT: the chosen experts). Default: all.
  void set_trainable(const TensorFilter& trainable);

  struct StepResult { double loss = 0, aux_loss = 0, grad_norm = 0; };
  // `tokens`: `rows` sequences of equal length n+1; position i predicts token i+1.
  StepResult step(std::span<const std::int32_t> tokens, std::int64_t rows, double lr);
  double loss(std::span<const std::int32_t> tokens, std::int64_t rows) const;  // mean next-token NLL
  RouterStats router_stats(std::span<const std::int32_t> tokens, std::int64_t rows) const;

  // config.json + model.safetensors holding the tensors passing `include` (default: all), in `dtype`.
  void save_checkpoint(const std::filesystem::path& dir, DType dtype, const TensorFilter& include = {}) const;
  // Weights and optimizer moments, atomically, with the step reached; load_state returns it.
  void save_state(const std::filesystem::path& file, std::int64_t step) const;
  std::int64_t load_state(const std::filesystem::path& file);

  struct Impl;

 private:
  explicit MoeTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mosaic
