#pragma once
// The CPU reference forward pass (fp32, transformers' semantics) over a per-sequence KV cache.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/model.h"

namespace mosaic {

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

struct Logits {
  std::int64_t rows = 0, vocab = 0;
  std::vector<float> values;  // [rows, vocab], row-major
  std::span<const float> row(std::int64_t r) const {
    return std::span<const float>(values).subspan(static_cast<std::size_t>(r * vocab), static_cast<std::size_t>(vocab));
  }
};

enum class LogitsFor { AllPositions, LastPosition };

// Runs `ids` ([cache.batch(), n] row-major) after the tokens already in `cache`, appends their keys
// and values, and returns logits: [batch*n, vocab] for AllPositions, [batch, vocab] for
// LastPosition. Throws InvalidArgument for an id outside the vocabulary or a full cache.
Logits forward(const Model& model, KvCache& cache, std::span<const std::int64_t> ids, LogitsFor which);

}  // namespace mosaic
