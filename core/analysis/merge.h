#pragma once
// Merge baselines written as ordinary HF checkpoints (config.json + model.safetensors, plus the
// source's tokenizer and generation files), loadable by Checkpoint like any other.
//  - averaging: the uniform mean of every variant's parameters (Multi-MoE's "averaging" baseline).
//  - consolidated: the static model the consolidated system computes for one target variant — its
//    own non-expert weights, the layout's resident copy at every resident position, its own expert
//    everywhere else. The runtime must reproduce this model's outputs exactly.
// Both are written to a temporary folder beside `out` and renamed into place, so a failure leaves
// nothing behind; `out` must not exist or be an empty folder.
#include <filesystem>
#include <string>

#include "analysis/layout.h"
#include "model/family.h"

namespace mosaic {

// Means are taken in double in variant order, rounded to fp32, then to the first variant's dtype.
void write_averaged(const Family& family, const std::filesystem::path& out);

// `layout` must already be matched to `family` (match_layout). Tensors keep the target's dtype.
void write_consolidated(const Family& family, const Layout& layout, const std::string& target,
                        const std::filesystem::path& out);

}  // namespace mosaic
