#pragma once
// ESFT's expert selection: per layer, the most relevant experts until their share of the layer's
// relevance reaches a threshold (at least one per layer).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "forge/moe_trainer.h"

namespace mosaic {

// criterion "gate": relevance = mean router probability; "token": share of top-k selections.
std::map<std::int64_t, std::vector<std::int64_t>> select_esft_experts(const RouterStats& stats, const std::string& criterion,
                                                                      double threshold);

}  // namespace mosaic
