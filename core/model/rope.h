#pragma once
// Rotary frequencies as transformers computes them (modeling_rope_utils.py): the default 1/θ^(2i/d),
// YaRN's blend of interpolated and extrapolated frequencies (DeepSeek, Qwen's long contexts), and
// Llama 3.1's band-wise scaling. No LibTorch: the CPU and CUDA backends both read these.
#include <vector>

#include "model/model_spec.h"

namespace mosaic {

// inv_freq[i] for i < rope_dim/2, in double precision (a backend rounds them to its own type).
std::vector<double> rope_inverse_frequencies(const ModelSpec& spec);

}  // namespace mosaic
