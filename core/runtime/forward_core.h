#pragma once
// Internal (ATen): the forward pass with the routed experts left to the caller, shared by the
// single-model reference (every expert in the Model) and the multi-variant Runtime (experts in
// slots, found through a reroute table). Include only from backend .cpp files.
#include <ATen/ATen.h>

#include <functional>
#include <span>
#include <vector>

#include "runtime/cpu_weights.h"
#include "runtime/forward.h"

namespace mosaic {

// The tokens one MoE layer routed to each expert: rows of the layer's input and router weights.
struct ExpertGroups {
  std::vector<std::vector<std::int64_t>> rows;  // [E][tokens routed to e]
  std::vector<std::vector<float>> weights;      // [E][same], the (renormalized) top-k weights
};

// Adds Σ over routed experts of weight · SwiGLU_e(x) into out ([N, H]) for MoE layer `layer`.
using RoutedExperts =
    std::function<void(std::int64_t layer, const at::Tensor& x, const ExpertGroups& groups, at::Tensor& out)>;

// forward() over `weights`' non-expert tensors; their `experts` vectors are never read.
Logits forward_with(const ModelSpec& spec, const ModelWeights& weights, KvCache& cache,
                    std::span<const std::int64_t> ids, LogitsFor which, const RoutedExperts& experts);

// out[rows] += weights · SwiGLU_m(x[rows]).
void add_expert(const at::Tensor& x, const std::vector<std::int64_t>& rows, const std::vector<float>& weights,
                const MlpWeights& m, at::Tensor& out);

}  // namespace mosaic
