#include "runtime/expert_importance.h"

#include <cmath>

#include "model/dtype_convert.h"

namespace mosaic {
namespace {

// Σ x² over a host tensor, converted from its stored dtype in blocks, read through the host tier.
double sum_of_squares(const HostStore& store, TensorId id) {
  const DType dtype = store.tensor(id).dtype;
  const std::size_t size = dtype_size(dtype);
  std::vector<float> block(4096);
  double sum = 0;
  store.read(id, [&](std::span<const std::byte> chunk, std::size_t) {
    const std::size_t n = chunk.size() / size;
    for (std::size_t i = 0; i < n; i += block.size()) {
      const std::size_t m = std::min(block.size(), n - i);
      to_float(dtype, chunk.data() + i * size, std::span<float>(block.data(), m));
      for (std::size_t j = 0; j < m; ++j) sum += static_cast<double>(block[j]) * block[j];
    }
  });
  return sum;
}

}  // namespace

ExpertImportance::ExpertImportance(const HostStore& store)
    : store_(store),
      rows_(store.targets()),
      experts_(store.spec().num_experts),
      scores_(static_cast<std::size_t>(store.spec().num_layers * rows_ * experts_), 0.0),
      norms_(static_cast<std::size_t>(store.distinct_experts()), -1.0) {}

void ExpertImportance::add(std::int64_t layer, int row, std::int64_t expert, double token_norm, double gate) {
  const ExpertId id = store_.expert(row, layer, expert);
  scores_[index(layer, row, expert)] += token_norm * gate * norm(id);
}

void ExpertImportance::decay(double factor) {
  if (factor == 1.0) return;
  for (double& s : scores_) s *= factor;
}

double ExpertImportance::norm(ExpertId expert) {
  double& n = norms_[static_cast<std::size_t>(expert)];
  if (n < 0 && !store_.has_bytes()) {
    n = 1;  // a store of shapes (a simulated device's) has no weights to take norms of: every expert alike
  } else if (n < 0) {
    // A delta expert's norm is its base's: the packed Δ is small beside it, and reading it whole
    // would cost what loading it does.
    const HostExpert& e = store_.expert_tensors(expert);
    n = std::sqrt(sum_of_squares(store_, e.gate) + sum_of_squares(store_, e.up) + sum_of_squares(store_, e.down));
  }
  return n;
}

}  // namespace mosaic
