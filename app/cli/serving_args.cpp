#include "cli/serving_args.h"

#include <nlohmann/json.hpp>

#include "analysis/family_analysis.h"
#include "cli/family_args.h"
#include "common/atomic_file.h"
#include "common/byte_size.h"
#include "common/error.h"

namespace mosaic::cli {

void ServingArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--variants", variants, "serve these variants with the multi-variant runtime (instead of --model)");
  cmd->add_option("--layout", layout, "with --variants: the layout file (mosaic-cli consolidate)");
  cmd->add_option("--capacity", capacity, "with --variants and no --layout: plan a round-robin layout with this many resident experts");
  cmd->add_option("--target", target, "with --variants: the variant to run");
  cmd->add_option("--hit", hit, "consolidated (any resident copy serves) | strict (only the target's own)")
      ->default_val("consolidated");
  cmd->add_option("--miss", miss, "transient (load, use, drop) | lru (keep in spare slots)")->default_val("transient");
  cmd->add_option("--budget", budget, "device budget, e.g. 2GiB (default: exactly what the layout needs)");
  cmd->add_option("--miss-slots", miss_slots, "slots per MoE layer for misses (-1 = top_k)")->default_val(-1);
  cmd->add_flag("--no-reconfig", no_reconfig, "ablation: never swap non-expert weights; layout variant 0's stay resident");
  cmd->add_option("--stats", stats, "write hits, misses, loads, swaps and timings to this JSON file");
}

std::unique_ptr<ServingSession> open_serving(const ServingArgs& a) {
  if ((a.layout.empty() && a.capacity < 0) || a.target.empty())
    throw InvalidArgument("--variants", "--layout / --capacity / --target", "serving several variants needs a layout and a target",
                          "give a layout from `mosaic-cli consolidate` (or --capacity N to plan one) and name the variant to run");
  RuntimeOptions options;
  const auto hit = parse_hit_policy(a.hit);
  if (!hit) throw InvalidArgument("--hit", "'" + a.hit + "'", "is not a hit policy", "use consolidated or strict");
  const auto miss = parse_miss_policy(a.miss);
  if (!miss) throw InvalidArgument("--miss", "'" + a.miss + "'", "is not a miss policy", "use transient or lru");
  options.hit = *hit;
  options.miss = *miss;
  options.miss_slots = a.miss_slots;
  options.swap_non_expert = !a.no_reconfig;
  if (!a.budget.empty()) {
    options.budget_bytes = parse_byte_size(a.budget);
    if (!options.budget_bytes) throw InvalidArgument("--budget", "'" + a.budget + "'", "is not a byte size", "write e.g. 2GiB");
  }
  auto s = std::make_unique<ServingSession>();
  open_family(s->family, a.variants);
  std::vector<int> to_store;
  if (a.layout.empty()) {  // plan one now, as `consolidate --capacity` would
    const auto analysis = analyze_family(s->family, {default_cache_dir(), 0, {}});
    s->layout = make_layout(s->family, analysis->sha256, plan_consolidation(analysis->distances, a.capacity, Policy::RoundRobin));
    to_store = match_layout(s->layout, s->family, analysis->sha256, "planned layout");
  } else {
    s->layout = load_layout(a.layout);
    to_store = match_layout(s->layout, s->family, family_sha256(s->family, default_cache_dir()), a.layout.string());
  }
  s->store = std::make_unique<HostStore>(s->family);
  s->target = s->store->index(a.target);
  if (s->target < 0)
    throw InvalidArgument("--target", "'" + a.target + "'", "is not one of the variants given", "name a variant by its folder name");
  s->runtime = std::make_unique<Runtime>(*s->store, s->layout, to_store, options);
  return s;
}

void write_serving_stats(const std::filesystem::path& path, const ServingSession& s, const RuntimeCounters& c,
                         const RequestStats* request) {
  nlohmann::ordered_json j;
  const Runtime& rt = *s.runtime;
  j["target"] = s.store->name(s.target);
  j["hit"] = std::string(hit_policy_name(rt.options().hit));
  j["miss"] = std::string(miss_policy_name(rt.options().miss));
  j["budget"] = {{"bytes", rt.budget().budget() == DeviceBudget::kUnlimited ? nlohmann::ordered_json(nullptr)
                                                                            : nlohmann::ordered_json(rt.budget().budget())},
                 {"used", rt.budget().used()},
                 {"peak", rt.budget().peak()}};
  j["swaps"] = c.swaps;
  j["swap_bytes"] = c.swap_bytes;
  j["swap_seconds"] = c.swap_seconds;
  const LayerCounts t = c.total();
  j["hits"] = t.hits;
  j["misses"] = t.misses;
  j["loads"] = t.loads;
  j["load_bytes"] = t.load_bytes;
  j["load_seconds"] = t.load_seconds;
  j["layers"] = nlohmann::ordered_json::array();
  for (std::size_t l = 0; l < c.layers.size(); ++l) {
    const LayerCounts& x = c.layers[l];
    j["layers"].push_back({{"layer", l}, {"hits", x.hits}, {"misses", x.misses}, {"loads", x.loads},
                           {"load_bytes", x.load_bytes}, {"load_seconds", x.load_seconds}});
  }
  if (request)
    j["request"] = {{"prompt_tokens", request->prompt_tokens}, {"generated_tokens", request->generated_tokens},
                    {"queue_wait_seconds", request->queue_wait_seconds}, {"swap_seconds", request->swap_seconds()},
                    {"ttft_seconds", request->ttft_seconds}, {"tpot_seconds", request->tpot_seconds},
                    {"total_seconds", request->total_seconds}};
  const std::string text = j.dump(1);
  write_file_atomically(path, [&](std::ostream& out) { out << text << "\n"; });
}

}  // namespace mosaic::cli
