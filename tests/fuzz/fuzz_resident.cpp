// A fixed resident set ({"<layer>": [expert ids]}, logits --resident) read against the qwen2_moe
// fixture's config: what is accepted keeps at least top_k experts in every MoE layer.
#include "analysis/resident_set.h"
#include "fuzz_target.h"
#include "model/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  static const ModelSpec spec = load_model_spec(MOSAIC_FUZZ_SPEC);
  const auto set = fuzz::accepted([&] { return parse_resident_set(fuzz::as_text(data, size), "resident.json", spec); });
  if (!set) return 0;
  if (set->size() != static_cast<std::size_t>(spec.num_layers)) fuzz::violated("a resident set with another layer count");
  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    const auto& keep = (*set)[static_cast<std::size_t>(l)];
    std::int64_t kept = 0;
    for (const bool k : keep) kept += k;
    if (keep.size() != static_cast<std::size_t>(spec.num_experts) || (spec.is_sparse(l) && kept < spec.top_k))
      fuzz::violated("an accepted resident set that keeps fewer experts than the router picks");
  }
  return 0;
}
