// plan-virtual: SwapMoE's memory planner from the command line — per-layer resident counts for a
// budget, measured on calibration text, written as a layout that generate, serve and the workbench
// serve with virtual experts.
#include <cmath>
#include <iomanip>
#include <iostream>

#include "analysis/family_analysis.h"
#include "analysis/virtual_plan.h"
#include "cli/analyzed.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "common/text_file.h"
#include "model/tokenizer.h"
#include "model/variant_folders.h"
#include "runtime/device_plan.h"
#include "runtime/miss_policy.h"
#include "serving/layout_serving.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

void add_plan_virtual_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan-virtual",
                                 "Plan virtual experts (SwapMoE) for a budget: per-layer resident counts that lose the least on calibration text");
  struct Opts {
    std::vector<fs::path> variants;
    std::string budget;
    fs::path calibration, out;
    VirtualPlanOptions plan;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--variants", o->variants, "checkpoint folders, or a folder of variant folders")->required();
  cmd->add_option("--budget", o->budget, "device memory budget, e.g. 12GiB, 900MB, 123456789")->required();
  cmd->add_option("--calibration", o->calibration, "text in the serving domain (UTF-8), encoded with the first variant's tokenizer")->required();
  cmd->add_option("--out", o->out, "layout JSON to write")->required();
  cmd->add_option("--window", o->plan.window, "calibration tokens per sequence")->default_val(128)->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--max-windows", o->plan.max_windows, "at most this many sequences, spread over the text")->default_val(16)->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--staging", o->plan.updates.staging, "staging slots per layer (charged): experts one update swaps in")
      ->default_val(1)
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--update-every", o->plan.updates.update_every, "steps between updates of the resident sets")->default_val(8)->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--decay", o->plan.updates.decay, "each step's factor on the importance before it, in (0, 1]")->default_val(0.9);
  cmd->add_option("--shift", o->plan.updates.shift, "update sooner once this share of a layer's importance is outside its set, in (0, 1]")
      ->default_val(0.25);
  add_reserve_options(cmd, o->plan.reserve, /*miss_slots=*/false);
  cmd->callback([o] {
    std::vector<fs::path> inputs = o->variants;
    inputs.push_back(o->calibration);
    check_output(o->out, "--out", inputs);
    const auto budget = parse_byte_size(o->budget);
    if (!budget) throw InvalidArgument("--budget", "'" + o->budget + "'", byte_size_problem(o->budget), "write e.g. 12GiB or 900MB");
    o->plan.budget_bytes = *budget;
    const VirtualConfig& u = o->plan.updates;
    if (!(u.decay > 0 && u.decay <= 1)) throw InvalidArgument("--decay", std::to_string(u.decay), "must be in (0, 1]");
    if (!(u.shift > 0 && u.shift <= 1)) throw InvalidArgument("--shift", std::to_string(u.shift), "must be in (0, 1]");
    Family family;
    open_family(family, o->variants);
    const std::string text = read_text_file(o->calibration, "give a text file in the serving domain");
    const fs::path tok = family.variants().front().checkpoint->dir() / "tokenizer.json";
    if (!fs::exists(tok))
      throw MissingError(tok.string(), "", "is absent: --calibration is encoded with the first variant's tokenizer", "copy the tokenizer.json beside config.json");
    const std::vector<std::int64_t> ids = Tokenizer::load(tok).encode(text, /*add_special=*/false);
    const HostStore store(family);
    // The distances too (cached), so that the workbench's grid shows the plan as it shows any layout.
    const auto analysis = analyzed(family, {default_cache_dir(), 0, {}});
    const Layout layout = plan_virtual(family, analysis->sha256, store, ids, o->plan, &analysis->distances);

    const VirtualLayout& v = *layout.virtual_experts;
    const VirtualLayout::Planner& p = v.planner;
    const ModelSpec& s = store.spec();
    std::cout << "budget            " << format_bytes(*budget) << "\n";
    const RuntimeConfig served = layout_config(layout, store.indices(family), store, family, {.budget = *budget, .reserve = o->plan.reserve});
    const DevicePlan device = plan_device(store, served, *make_miss_policy("masked"));
    for (const DeviceItem& item : device.items) std::cout << "  " << item.name << "  " << format_bytes(item.bytes) << "\n";
    std::cout << "  used " << device.budget.used() << " of " << *budget << " bytes";
    if (*budget - device.budget.used() >= store.expert_bytes()) std::cout << " (room left where one more expert would not lower the calibration loss)";
    std::cout << "\n";
    std::cout << "calibration: " << p.calibration_tokens << " tokens of " << o->calibration.string() << "; every expert resident: NLL "
              << std::fixed << std::setprecision(4) << p.full_nll << " (perplexity " << std::setprecision(2) << std::exp(p.full_nll) << ")\n";
    std::cout << "layer  experts  NLL rise alone\n";
    for (std::int64_t l = 0; l < s.num_layers; ++l) {
      const std::int64_t c = v.counts[static_cast<std::size_t>(l)];
      std::cout << std::setw(5) << l << "  " << std::setw(7) << (s.is_sparse(l) ? std::to_string(c) + "/" + std::to_string(s.num_experts) : "dense");
      if (s.is_sparse(l)) std::cout << "  " << std::setprecision(4) << p.loss[static_cast<std::size_t>(l)][static_cast<std::size_t>(c - p.first_count)];
      std::cout << "\n";
    }
    std::cout << std::setprecision(4) << "planned: objective " << p.objective << ", measured NLL " << p.planned_nll << " (perplexity "
              << std::setprecision(2) << std::exp(p.planned_nll) << ")\n"
              << std::setprecision(4) << "uniform " << p.uniform_count << " per layer: objective " << p.uniform_objective << ", measured NLL "
              << p.uniform_nll << " (perplexity " << std::setprecision(2) << std::exp(p.uniform_nll) << ")\n";
    save_layout(layout, o->out);
    std::cout << "wrote " << o->out.string() << "\n";
  });
}

}  // namespace mosaic::cli
