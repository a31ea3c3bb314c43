#include "serving/served_family.h"

#include "analysis/family_analysis.h"
#include "analysis/resident_set.h"
#include "common/error.h"
#include "model/variant_folders.h"
#include "serving/layout_planning.h"

namespace mosaic {

void open_served(ServedFamily& out, const ServeAsk& ask) {
  if (ask.model.empty() == ask.variants.empty())
    throw InvalidArgument("serving", "model / variants", ask.model.empty() ? "neither was given" : "both were given", "give one checkpoint, or several variants");
  if (ask.model.empty() && (!ask.base.empty() || !ask.resident.empty()))
    throw InvalidArgument("serving", ask.base.empty() ? "resident" : "base", "belongs to one checkpoint", "give it with a model, not variants");
  const std::optional<std::filesystem::path> cache = ask.cache_dir ? ask.cache_dir : std::optional(default_cache_dir());
  if (!ask.model.empty()) {
    // One checkpoint: its own expert at every position (an adapter's tuned ones, its base's elsewhere).
    // A folder of several (a family) is refused rather than served as whichever sorts first.
    if (const auto found = discover_variants({ask.model}); found.size() > 1) {
      std::string names;
      for (const auto& [name, dir] : found) names += (names.empty() ? "" : ", ") + name;
      throw InvalidArgument(ask.model.string(), "", "is a folder of " + std::to_string(found.size()) + " variants (" + names + "), not one checkpoint",
                            "give one of them, e.g. " + found.front().second.string() + ", or serve the folder's variants together");
    }
    open_family(out.family, {ask.model}, ask.base);
    out.store = std::make_unique<HostStore>(out.family, ask.host_budget);
    out.model = out.family.variants().front().name;
    const int t = out.store->index(out.model);
    const ModelSpec& spec = out.store->spec();
    const ResidentSet resident = ask.resident.empty() ? ResidentSet() : load_resident_set(ask.resident, spec);
    out.config = served_config(ask.choices);
    for (std::int64_t l = 0; l < spec.num_layers; ++l)
      for (std::int64_t e = 0; e < spec.num_experts && spec.is_sparse(l); ++e)
        if (resident.empty() || resident[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)]) out.config.pinned.push_back({l, e, t});
    out.config.hit = HitPolicy::Strict;
    if (!resident.empty()) out.config.miss = "masked";  // the set is fixed: never load, never update
    return;
  }
  if (ask.layout.empty() && !ask.capacity && !ask.choices.budget)
    throw InvalidArgument("serving", "layout / capacity / budget", "serving several variants needs a layout", "give a layout file, a capacity or a budget");
  open_family(out.family, ask.variants);
  out.store = std::make_unique<HostStore>(out.family, ask.host_budget);
  std::vector<int> to_store;
  if (ask.layout.empty()) {  // planned now, as `consolidate` and the workbench plan one
    Outcome<FamilyAnalysis> analysis = analyze_family(out.family, {cache, 0, {}});
    if (analysis.ok() && ask.warn)
      for (const std::string& w : analysis->warnings) ask.warn(w);
    out.layout = plan_layout(out.family, *analysis, out.store->sets(),
                             {.budget = ask.choices.budget, .capacity = ask.capacity, .reserve = ask.choices.reserve,
                              .resident_sets = ask.choices.resident_sets, .layer_caps = ask.layer_caps})
                     .layout;
    to_store = match_layout(out.layout, out.family, analysis->sha256, "planned layout");
  } else {
    out.layout = load_layout(ask.layout);
    to_store = match_layout(out.layout, out.family, family_sha256(out.family, cache), ask.layout.string());
  }
  // Within the budget the layout was planned under, with the reserve it records (the caller's miss
  // slots, where it gave its own, still count); choices.budget serves it within another. A layout
  // planned by capacity alone records no budget: no limit.
  out.config = layout_config(out.layout, to_store, *out.store, out.family, ask.choices);
  if (ask.no_reconfig) out.config.non_expert_of.assign(static_cast<std::size_t>(out.store->targets()), to_store.at(0));
}

}  // namespace mosaic
