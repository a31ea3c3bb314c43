// analyze, consolidate and merge: Multi-MoE's offline half from the command line.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "runtime/capacity.h"
#include "analysis/consolidation.h"
#include "analysis/cross_distance.h"
#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "analysis/merge.h"
#include "cli/analyzed.h"
#include "cli/choice.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "model/variant_folders.h"
#include "common/atomic_file.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "runtime/device_plan.h"
#include "runtime/host_store.h"
#include "runtime/miss_policy.h"
#include "serving/hybrid_plan.h"
#include "serving/layout_planning.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // fields in the order people read them

namespace mosaic::cli {
namespace {

// Options every analysis command shares: the variants, the cache and the threads.
struct FamilyOptions {
  std::vector<fs::path> variants;
  fs::path cache_dir;
  bool no_cache = false;
  int threads = 0;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--variants", variants, "checkpoint folders, or a folder of variant folders")->required();
    cmd->add_option("--cache-dir", cache_dir, "where hashes and distances are cached (default: $MOSAIC_CACHE_DIR, "
                                              "$XDG_CACHE_HOME/mosaic or ~/.cache/mosaic)");
    cmd->add_flag("--no-cache", no_cache, "neither read nor write the cache");
    add_threads_option(cmd, threads, "threads (0 = all cores)");
  }
  std::optional<fs::path> cache() const {
    if (no_cache) return std::nullopt;
    return cache_dir.empty() ? default_cache_dir() : cache_dir;
  }
};

// Prints progress to stderr in 10 % steps, on a terminal only (a log gets the summary line).
AnalysisProgress progress_printer(const char* what) {
  if (!::isatty(STDERR_FILENO)) return {};
  auto last = std::make_shared<std::int64_t>(-1);
  return [what, last](std::int64_t done, std::int64_t total) {
    const std::int64_t tenth = done * 10 / std::max<std::int64_t>(total, 1);
    if (tenth != *last) {
      *last = tenth;
      std::cerr << "\r" << what << " " << done << "/" << total << std::flush;
      if (done == total) std::cerr << "\n";
    }
    return true;
  };
}

FamilyAnalysis analyze(const Family& family, const FamilyOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto r = analyzed(family, {o.cache(), o.threads, progress_printer("expert distances: positions")});
  r.rethrow();
  if (!r) throw std::runtime_error("analysis cancelled");  // no caller cancels from the command line
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << (r->from_cache ? "distances read from the cache" : "distances computed") << " in " << std::fixed
            << std::setprecision(2) << s << " s\n";
  return std::move(*r);
}

json grid(const std::vector<double>& cells, std::int64_t layers, std::int64_t experts, std::size_t offset = 0) {
  json rows = json::array();
  for (std::int64_t l = 0; l < layers; ++l) {
    json row = json::array();
    for (std::int64_t e = 0; e < experts; ++e) {
      const double d = cells[offset + static_cast<std::size_t>(l * experts + e)];
      row.push_back(std::isnan(d) ? json(nullptr) : json(d));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

json variants_json(const Family& family, const std::vector<std::string>& sha256) {
  json out = json::array();
  for (std::size_t i = 0; i < family.size(); ++i) {
    const Variant& v = family.variants()[i];
    out.push_back({{"name", v.name}, {"path", fs::absolute(v.checkpoint->dir()).lexically_normal().string()},
                   {"sha256", sha256[i]}});
  }
  return out;
}

void print_distance_summary(const Family& family, const ExpertDistances& d) {
  std::cout << "position distance d(l, e), summed over " << d.pair_count() << " variant pairs\n"
            << "  layer      min       mean        max\n";
  for (std::int64_t l = 0; l < d.layers; ++l) {
    if (!family.spec().is_sparse(l)) {
      std::cout << std::setw(7) << l << "  (dense)\n";
      continue;
    }
    double lo = INFINITY, hi = 0, sum = 0;
    for (std::int64_t e = 0; e < d.experts; ++e) lo = std::min(lo, d.at(l, e)), hi = std::max(hi, d.at(l, e)), sum += d.at(l, e);
    std::cout << std::setw(7) << l << std::setprecision(4) << std::scientific << std::setw(11) << lo << std::setw(11)
              << sum / static_cast<double>(d.experts) << std::setw(11) << hi << "\n";
  }
  std::cout << std::defaultfloat;
}

void write_json(const fs::path& path, const json& j) {
  const std::string text = j.dump(1);
  write_file_atomically(path, [&](std::ostream& out) { out << text << "\n"; });
}

}  // namespace

void add_analyze_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("analyze", "Expert distances across a family's variants (Multi-MoE Algorithm 1)");
  struct Opts : FamilyOptions { std::vector<std::string> pair; std::int64_t layer = -1; fs::path out; };
  auto o = std::make_shared<Opts>();
  o->add_to(cmd);
  cmd->add_option("--pair", o->pair, "two variant names: also their cross-position distance matrix")->expected(2);
  cmd->add_option("--layer", o->layer, "with --pair: only this layer's experts (default: every MoE position)");
  cmd->add_option("--out", o->out, "analysis JSON to write")->required();
  cmd->callback([o] {
    check_output(o->out, "--out", o->variants);
    Family family;
    open_family(family, o->variants);
    const FamilyAnalysis a = analyze(family, *o);
    const ExpertDistances& d = a.distances;
    json j;
    j["schema"] = "mosaic.analysis/1";
    j["variants"] = variants_json(family, a.sha256);
    j["layers"] = d.layers;
    j["experts"] = d.experts;
    j["distance"] = grid(d.position, d.layers, d.experts);
    j["pairs"] = json::array();
    const std::size_t cells = static_cast<std::size_t>(d.layers * d.experts);
    for (std::int64_t i = 0; i < d.variants; ++i)
      for (std::int64_t k = i + 1; k < d.variants; ++k)
        j["pairs"].push_back({{"a", family.variants()[static_cast<std::size_t>(i)].name},
                              {"b", family.variants()[static_cast<std::size_t>(k)].name},
                              {"distance", grid(d.pairs, d.layers, d.experts, static_cast<std::size_t>(d.pair_index(i, k)) * cells)}});
    if (!o->pair.empty()) {
      const Variant* a = family.find(o->pair[0]);
      const Variant* b = family.find(o->pair[1]);
      for (const auto& [name, v] : {std::pair{o->pair[0], a}, std::pair{o->pair[1], b}})
        if (!v) throw InvalidArgument("--pair", "'" + name + "'", "is not one of the variants given",
                                      "name variants by their folder names");
      const std::optional<std::int64_t> layer = o->layer >= 0 ? std::optional(o->layer) : std::nullopt;
      const auto cross = cross_position_distances(*a->checkpoint, *b->checkpoint, layer,
                                                  progress_printer("cross-position distances: row blocks"), o->threads);
      json positions = json::array(), matrix = json::array();
      for (const auto& [l, e] : cross->positions) positions.push_back({l, e});
      for (std::size_t r = 0; r < cross->size(); ++r) {
        json row = json::array();
        for (std::size_t c = 0; c < cross->size(); ++c) row.push_back(cross->at(r, c));
        matrix.push_back(std::move(row));
      }
      j["cross"] = {{"a", a->name}, {"b", b->name}, {"layer", layer ? json(*layer) : json(nullptr)},
                    {"positions", positions}, {"matrix", matrix}};
      double same = 0, other = 0;
      for (std::size_t r = 0; r < cross->size(); ++r)
        for (std::size_t c = 0; c < cross->size(); ++c) (r == c ? same : other) += cross->at(r, c);
      const double n = static_cast<double>(cross->size());
      std::cout << "cross-position " << a->name << " vs " << b->name << ": mean same-position distance "
                << same / n << ", mean cross-position distance " << (n > 1 ? other / (n * (n - 1)) : NAN) << "\n";
    }
    print_distance_summary(family, d);
    write_json(o->out, j);
    std::cout << "wrote " << o->out.string() << "\n";
  });
}

namespace {

// consolidate --policy hybrid: a runtime over the family's store decides what the budget holds.
void write_hybrid_layout(const Family& family, const FamilyOptions& options, const std::string& budget_text, const ReserveSpec& reserve,
                         const fs::path& out) {
  const auto budget = parse_byte_size(budget_text);
  if (!budget) throw InvalidArgument("--budget", "'" + budget_text + "'", byte_size_problem(budget_text), "write e.g. 12GiB or 900MB");
  const HostStore store(family);
  const int base = hybrid_base(store);  // before the analysis: fail fast
  const FamilyAnalysis a = analyze(family, options);
  // Priced, not built: the budget is the serving device's, which may be larger than this machine.
  const RuntimeConfig config = hybrid_planning_config(store, a.distances, *budget, reserve);
  const DevicePlan device = plan_device(store, config, *make_miss_policy(config.miss));
  Layout layout = make_layout(family, a.sha256, hybrid_plan_from(store, a.distances, base, device.pinned));
  layout.budget_bytes = *budget;
  layout.reserve = plan_reserve(store.spec(), store.expert_bytes() + store.max_delta_bytes(), reserve);
  layout.reserve_spec = reserve;
  std::int64_t resident = 0, positions = 0;
  for (std::int64_t n : layout.plan.deltas) {
    resident += n;
    positions += n > 0;
  }
  const std::size_t total = deltas_layer_major(store, delta_folders_over(store, base)).size();
  std::cout << "budget            " << format_bytes(*budget) << "\n";
  for (const DeviceItem& item : device.items) std::cout << "  " << item.name << "  " << format_bytes(item.bytes) << "\n";
  std::cout << "hybrid: " << store.name(base) << "'s copy at all " << layout.plan.capacity << " positions; " << resident << " of " << total
            << " deltas resident, at " << positions << " positions\n";
  save_layout(layout, out);
  std::cout << "wrote " << out.string() << "\n";
}

}  // namespace

void add_consolidate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("consolidate", "Plan which experts stay resident under a memory budget (a layout file)");
  struct Opts : FamilyOptions {
    std::string budget, policy = "round-robin";
    std::int64_t capacity = -1;
    std::vector<double> shares;
    ReserveSpec reserve;
    fs::path out;
  };
  auto o = std::make_shared<Opts>();
  o->add_to(cmd);
  auto* budget = cmd->add_option("--budget", o->budget, "device memory budget, e.g. 12GiB, 900MB, 123456789");
  auto* capacity = cmd->add_option("--capacity", o->capacity, "resident experts, given directly");
  budget->excludes(capacity);
  cmd->add_option("--policy", o->policy,
                  "round-robin (the paper), medoid, weighted, or hybrid (delta folders over their base: the base everywhere, "
                  "deltas at the least similar positions while --budget holds them)")
      ->default_val("round-robin");
  cmd->add_option("--shares", o->shares, "weighted: expected traffic share of each variant, in order")->delimiter(',');
  add_reserve_options(cmd, o->reserve, /*miss_slots=*/true);
  cmd->add_option("--out", o->out, "layout JSON to write")->required();
  cmd->callback([o] {
    check_output(o->out, "--out", o->variants);
    if (o->budget.empty() && o->capacity < 0)
      throw InvalidArgument("consolidate", "--budget / --capacity", "neither was given", "give one of them");
    const auto policy = parse_policy(o->policy);
    if (!policy) refuse_choice("--policy", o->policy, "a policy", {"round-robin", "medoid", "weighted", "hybrid"});
    if (*policy == Policy::Hybrid && o->budget.empty())
      throw InvalidArgument("--policy", "hybrid", "is planned from a budget: the deltas resident are what it holds", "give --budget");
    Family family;
    open_family(family, o->variants);
    if (*policy == Policy::Hybrid) return write_hybrid_layout(family, *o, o->budget, o->reserve, o->out);
    LayoutAsk ask{.policy = *policy, .shares = o->shares, .reserve = o->reserve};
    if (o->capacity >= 0) ask.capacity = o->capacity;
    const int sets = non_expert_sets(family);
    if (!o->budget.empty()) {
      ask.budget = parse_byte_size(o->budget);
      if (!ask.budget) throw InvalidArgument("--budget", "'" + o->budget + "'", byte_size_problem(o->budget), "write e.g. 12GiB or 900MB");
      // Priced before the analysis, to fail fast; the workbench plans the same budget the same way
      // (room for a second non-expert set where it costs at most 1/8 of the experts).
      const CapacityPlan plan = *budget_plan(family, sets, ask);
      std::cout << "budget            " << format_bytes(plan.budget_bytes) << "\n"
                << "  non-expert      " << format_bytes(plan.non_expert_bytes) << " (one variant's)\n";
      if (plan.positions_for_sets > 0)
        std::cout << "  a second set    " << format_bytes(plan.non_expert_bytes) << "  = " << plan.positions_for_sets
                  << " expert positions, so that a swap overlaps decoding\n";
      for (const ReserveItem& r : plan.reserve)
        std::cout << "  " << std::left << std::setw(16) << r.name << std::right << format_bytes(r.bytes) << "  = " << r.detail << "\n";
      std::cout << "  experts         " << plan.capacity << " of " << plan.positions << " positions × "
                << format_bytes(plan.bytes_per_expert) << "\n";
    }
    const FamilyAnalysis a = analyze(family, *o);
    Layout layout = plan_layout(family, a, sets, ask).layout;
    const auto counts = layout.plan.resident_counts();
    std::cout << "capacity " << layout.plan.capacity << " of " << moe_positions(family.spec()) << " positions, policy "
              << policy_name(*policy) << "\nresident per variant:";
    for (std::size_t i = 0; i < counts.size(); ++i) std::cout << " " << family.variants()[i].name << "=" << counts[i];
    std::cout << "\n";
    save_layout(layout, o->out);
    std::cout << "wrote " << o->out.string() << "\n";
  });
}

void add_merge_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("merge", "Write a merge baseline as an HF checkpoint: averaging, or the consolidated model of one target");
  struct Opts : FamilyOptions { std::string method; fs::path layout, out; std::string target; };
  auto o = std::make_shared<Opts>();
  o->add_to(cmd);
  cmd->add_option("--method", o->method, "averaging | consolidated")->required()->check(CLI::IsMember({"averaging", "consolidated"}));
  cmd->add_option("--layout", o->layout, "consolidated: the layout file");
  cmd->add_option("--target", o->target, "consolidated: the variant whose model to write");
  cmd->add_option("--out", o->out, "output checkpoint folder (must not exist, or be empty)")->required();
  cmd->callback([o] {
    auto inputs = o->variants;
    inputs.push_back(o->layout);
    check_output(o->out, "--out", inputs, OutputKind::Folder);
    Family family;
    open_family(family, o->variants);
    if (o->method == "averaging") {
      write_averaged(family, o->out);
    } else {
      if (o->layout.empty() || o->target.empty())
        throw InvalidArgument("merge", "--layout / --target", "the consolidated method needs both", "give the layout file and a variant name");
      const Layout layout = load_layout(o->layout);
      if (layout.plan.policy == Policy::Hybrid)  // its cells hold deltas, which a dense checkpoint cannot carry apart
        throw InvalidArgument(o->layout.string(), "policy", "is hybrid: its positions serve each folder's delta on the base's copy",
                              "write a delta folder's dense checkpoint with `mosaic-cli delta expand`, or plan a round-robin, medoid or "
                              "weighted layout to merge");
      if (layout.plan.policy == Policy::Virtual)  // it masks experts per request, as traffic moves: no checkpoint holds that
        throw InvalidArgument(o->layout.string(), "policy", "is virtual: it serves a changing subset of each variant's own experts, which a merged checkpoint cannot hold",
                              "serve it with --layout, or plan a round-robin, medoid or weighted layout to merge");
      match_layout(layout, family, family_sha256(family, o->cache()), o->layout.string());
      write_consolidated(family, layout, o->target, o->out);
    }
    std::cout << "wrote " << o->method << " checkpoint to " << o->out.string() << "\n";
  });
}

}  // namespace mosaic::cli
