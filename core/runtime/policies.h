#pragma once
// Which rows a pinned expert slot serves (Multi-MoE §3.2). Miss policies are types: miss_policy.h.
#include <optional>
#include <string_view>

namespace mosaic {

enum class HitPolicy {
  Consolidated,  // the layout's resident copy serves every target at its position (the paper)
  Strict,        // a slot serves only the targets whose own expert it holds, byte for byte
};

std::string_view hit_policy_name(HitPolicy p);  // "consolidated", "strict"
std::optional<HitPolicy> parse_hit_policy(std::string_view name);

}  // namespace mosaic
