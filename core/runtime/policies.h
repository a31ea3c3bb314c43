#pragma once
// How a routed (layer, expert) of the requested variant finds its weights (Multi-MoE §4.2).
#include <optional>
#include <string_view>

namespace mosaic {

enum class HitPolicy {
  Consolidated,  // the layout's resident copy serves every variant (the paper)
  Strict,        // a slot serves only the variant whose copy it holds
};

enum class MissPolicy {
  Transient,  // copy the variant's own expert into a scratch slot, use it, drop it (the paper)
  Lru,        // keep it in a spare slot within the budget, evicting the least recently used
};

std::string_view hit_policy_name(HitPolicy p);    // "consolidated", "strict"
std::string_view miss_policy_name(MissPolicy p);  // "transient", "lru"
std::optional<HitPolicy> parse_hit_policy(std::string_view name);
std::optional<MissPolicy> parse_miss_policy(std::string_view name);

}  // namespace mosaic
