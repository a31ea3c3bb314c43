// An ESFT adapter's expert_cfg.json, read against the qwen2_moe fixture's config: layer keys and
// expert ids are checked against the model.
#include "fuzz_target.h"
#include "model/esft_adapter.h"
#include "model/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  static const ModelSpec spec = load_model_spec(MOSAIC_FUZZ_SPEC);
  const auto cfg = fuzz::accepted([&] { return parse_expert_cfg(fuzz::as_text(data, size), "expert_cfg.json", spec); });
  if (!cfg) return 0;
  for (const auto& [layer, ids] : cfg->experts) {
    if (layer < 0 || layer >= spec.num_layers || !spec.is_sparse(layer)) fuzz::violated("an adapter layer outside the model's MoE layers");
    for (const auto id : ids)
      if (id < 0 || id >= spec.num_experts) fuzz::violated("an adapter expert outside the model");
  }
  return 0;
}
