#pragma once
// The single-model reference forward pass (CPU, fp32, transformers' semantics) over contiguous KV
// caches: every expert in the Model, no slots. It is what "a request run alone" means in the tests;
// the engine's batched step (runtime/backend.h) must agree with it.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/logits.h"
#include "runtime/model.h"

namespace mosaic {

// What one routed expert of `layer` was given in a forward: the rows it was routed (token indices
// over batch × positions, ascending), their hidden states x [n, hidden] and its intermediate
// activations act(x·gateᵀ) ⊙ (x·upᵀ) [n, intermediate], row-major fp32. GPTQ's calibration
// (analysis/calibration.h) sums their outer products; routing measurement reads the rows.
using ExpertInputSink = std::function<void(std::int64_t layer, std::int64_t expert, std::span<const std::int64_t> rows,
                                           std::span<const float> x, std::span<const float> mid)>;

// Keys and values of every layer for `batch` sequences of up to `capacity` tokens.
class KvCache {
 public:
  KvCache(const ModelSpec& spec, std::int64_t batch, std::int64_t capacity);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  std::int64_t batch() const;
  std::int64_t capacity() const;
  std::int64_t position() const;  // tokens already cached per sequence
  void reset();

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};


// Runs `ids` ([cache.batch(), n] row-major) after the tokens already in `cache`, appends their keys
// and values, and returns logits: [batch*n, vocab] for AllPositions, [batch, vocab] for
// LastPosition. Throws InvalidArgument for an id outside the vocabulary or a full cache.
// `allowed` (optional, [layers][experts]): SwapMoE's masked gating as a reference — the router
// logits of experts not allowed are −inf before the softmax and top-k.
// `sink` (optional) receives what each routed expert of each MoE layer was given (calibration).
Logits forward(const Model& model, KvCache& cache, std::span<const std::int64_t> ids, LogitsFor which,
               const std::vector<std::vector<bool>>* allowed = nullptr, const ExpertInputSink* sink = nullptr);

}  // namespace mosaic
