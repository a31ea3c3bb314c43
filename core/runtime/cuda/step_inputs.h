#pragma once
// What the device needs to know about a step, gathered on the host into flat arrays that travel in
// one copy: token ids, reroute rows, positions, each token's KV block list, rotary cos/sin, the
// groups of tokens sharing a resident-set buffer, and the rows whose logits come back. Plain C++ (no
// CUDA), so it is tested on any machine.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/latent_attention.h"
#include "kernels/router_topk.h"
#include "model/model_spec.h"
#include "runtime/step.h"

namespace mosaic::cuda {

struct TokenGroup {
  int buffer = 0;
  std::int64_t begin = 0, end = 0;  // tokens
  std::int64_t wanted_begin = 0, wanted_end = 0;  // into wanted
};

struct StepInputs {
  std::int64_t tokens = 0;
  std::vector<TokenGroup> groups;      // consecutive tokens of one buffer
  std::vector<std::int64_t> offset;    // [chunks]: first token
  // Host only, as lay_out (step_layout.h) gives them: [tokens] the caller's sequence index; for route
  // traces (StepChunk::trace), [sequences] whether its chunk asked and its first token.
  std::vector<int> sequence;
  std::vector<char> traced;
  std::vector<std::int64_t> first;
  bool any_traced = false;
  // Uploaded, in this order:
  std::vector<std::int32_t> ids, rows, positions, block_offset;  // [tokens]
  std::vector<std::int32_t> blocks;    // each chunk's block list, concatenated
  std::vector<std::int32_t> wanted;    // token indices whose logits return, group by group
  std::vector<float> cos, sin;         // [tokens, rope_dim()]: the rotary part's (head_dim but for MLA)
  std::vector<double> temperature;     // [wanted]: the draw's (StepChunk::draw_temperature); −1: the row returns whole
  std::int32_t max_positions = 0;      // the longest context any token of the step sees
  std::int64_t highest_block = -1;
  std::vector<std::int32_t> distinct_rows;  // reroute rows present, ascending

  // The device copies after upload.
  struct Device {
    const std::int32_t *ids, *rows, *positions, *block_offset, *blocks, *wanted;
    const float *cos, *sin;
    const double* temperature;
  } device{};
  bool whole_rows() const;  // whether any wanted row returns whole
  bool draws() const;       // whether any is drawn from candidates
  std::int64_t sampled_rows() const;  // wanted rows up to the last one drawn at a temperature (> 0)
};

// The draws a step prepares on the device (kernels/token_candidates.h), in one region: byte offsets
// of each array for `wanted` rows of `candidates` keys. The keys come last, so that a step copies
// back only the per-row values and the keys of rows up to its last one drawn at a temperature.
constexpr int kDrawCandidates = 512;
struct DrawLayout {
  std::size_t normaliser = 0, max_logit = 0, first_max = 0, keys = 0, bytes = 0;
  std::size_t key_row = 0;  // bytes of one row's keys
  // The region from its start through the keys of the first `rows` rows.
  std::size_t bytes_through(std::int64_t rows) const { return keys + static_cast<std::size_t>(rows) * key_row; }
};
DrawLayout draw_layout(std::int64_t wanted, int candidates = kDrawCandidates);

// Throws InvalidArgument for a token id outside the vocabulary, a chunk whose blocks are too few or a
// draw temperature that is negative or not finite.
StepInputs step_inputs(const StepBatch& batch, const ModelSpec& spec, const std::vector<float>& inv_freq,
                       std::int64_t block_tokens);
// transformers' rotary inverse frequencies 1 / θ^(2i/d) in fp32, or scaled (YaRN, Llama 3.1).
std::vector<float> inverse_frequencies(const ModelSpec& spec);
// Why the CUDA backend cannot serve `spec` (what of the architecture it does not implement), or
// nullopt. The CPU backend serves every spec Mosaic reads.
std::optional<std::string> cuda_unsupported(const ModelSpec& spec);
// The model's router as the device's router_choice takes it (DeepSeek's scores, groups and scale);
// `bias`: the device copy of e_score_correction_bias, or null.
kernels::RouterRule router_rule(const ModelSpec& spec, const float* bias);
// Whether the router is the plain softmax top-k that router_topk and the fused routing launches make.
bool plain_router(const ModelSpec& spec);
// DeepSeek's latent attention's sizes (spec.mla set).
kernels::LatentShape latent_shape(const ModelSpec& spec);

// The uploaded arrays packed back to back (each 256-byte aligned): the bytes, and where each starts.
struct PackedInputs {
  std::vector<std::byte> bytes;
  std::size_t ids, rows, positions, block_offset, blocks, wanted, cos, sin, temperature;
};
PackedInputs pack(const StepInputs& in);
// The same at fixed offsets, for steps replayed from a CUDA graph (whose kernels keep the pointers
// they were captured with): room for `tokens` tokens of `head_dim` and `blocks` block ids. Throws
// InvalidArgument when the step does not fit.
PackedInputs pack_fixed(const StepInputs& in, std::int64_t tokens, std::int64_t blocks, std::int64_t head_dim);

// Where each array of `packed` lies once copied to device memory at `base`.
StepInputs::Device device_inputs(const std::byte* base, const PackedInputs& packed);

}  // namespace mosaic::cuda
