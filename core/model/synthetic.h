#pragma once
// Random-weight checkpoints of any ModelSpec, for benchmarks and tests that need sizes or
// architectures no fixture has. Written through the same safetensors writer as everything else.
#include <cstdint>
#include <filesystem>
#include <functional>

#include "model/dtype.h"
#include "model/esft_adapter.h"
#include "model/model_spec.h"
#include "model/weight_names.h"

namespace mosaic {

// Writes config.json and model.safetensors into `dir` (created if absent). Weights ~ N(0, 0.02²),
// norm weights ~ 1 + N(0, 0.02²); `dtype` is BF16, F16 or F32. Deterministic for a given seed: each
// tensor's values depend on its seed and name only, so `seed_of` (a tensor's seed; default `seed`) can
// make checkpoints that share tensors byte for byte.
void write_synthetic_checkpoint(const std::filesystem::path& dir, const ModelSpec& spec, DType dtype, std::uint64_t seed,
                                const std::function<std::uint64_t(const ExpectedTensor&)>& seed_of = {});

// An ESFT adapter of `spec` as DeepSeek releases them (expert_cfg.json without base_model, the tuned
// experts' tensors named "layers.N.…", the base's config.json): random values for the experts `cfg`
// lists, from `seed`. It is served over the base listed before it.
void write_synthetic_esft_adapter(const std::filesystem::path& dir, const ModelSpec& spec, const EsftAdapterConfig& cfg, DType dtype,
                                  std::uint64_t seed);

// A family of `variants` checkpoints in dir/v0 … (v0 the base): every variant's non-expert tensors
// its own, its routed experts shared byte for byte with v0's where `shared(layer, expert)` says so,
// its own otherwise — fine-tunes that changed some experts only. Written only where absent.
void write_synthetic_family(const std::filesystem::path& dir, const ModelSpec& spec, DType dtype, int variants,
                            const std::function<bool(std::int64_t layer, std::int64_t expert)>& shared, std::uint64_t seed);

// A Mixtral-architecture spec (SwiGLU experts, top-2 of `experts`, GQA 4:1).
ModelSpec mixtral_like_spec(std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate,
                            std::int64_t layers, std::int64_t experts);

std::int64_t parameter_count(const ModelSpec& spec);
// Parameters one token touches: everything but the experts it is not routed to.
std::int64_t active_parameter_count(const ModelSpec& spec);

}  // namespace mosaic
