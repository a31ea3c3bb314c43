#include "runtime/policies.h"

namespace mosaic {

std::string_view hit_policy_name(HitPolicy p) { return p == HitPolicy::Consolidated ? "consolidated" : "strict"; }

std::optional<HitPolicy> parse_hit_policy(std::string_view name) {
  for (HitPolicy p : {HitPolicy::Consolidated, HitPolicy::Strict})
    if (name == hit_policy_name(p)) return p;
  return std::nullopt;
}

std::optional<KvAdmission> parse_kv_admission(std::string_view name) {
  if (name == "greedy") return KvAdmission::Greedy;
  if (name == "reserve") return KvAdmission::Reserve;
  return std::nullopt;
}

}  // namespace mosaic
