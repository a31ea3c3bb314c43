#pragma once
// Rows of vocabulary logits, as every forward pass returns them.
#include <cstdint>
#include <span>
#include <vector>

namespace mosaic {

struct Logits {
  std::int64_t rows = 0, vocab = 0;
  std::vector<float> values;  // [rows, vocab], row-major
  std::span<const float> row(std::int64_t r) const {
    return std::span<const float>(values).subspan(static_cast<std::size_t>(r * vocab), static_cast<std::size_t>(vocab));
  }
};

enum class LogitsFor { AllPositions, LastPosition };

}  // namespace mosaic
