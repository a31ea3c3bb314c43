// forge: train the sample family a recipe describes (resumable; Ctrl-C saves and stops).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "forge/forge.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_interrupt(int) { g_stop.store(true); }

}  // namespace

void add_forge_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("forge", "Train a sample family (base, fine-tuned variants, ESFT adapters) from a recipe");
  struct Opts { fs::path recipe, output, work; int threads = 0; std::int64_t step_limit = -1; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--recipe", o->recipe, "mosaic.forge/1 recipe, e.g. sample_configs/forge-sample.json")->required();
  cmd->add_option("--output", o->output, "write the family here instead of the recipe's output");
  cmd->add_option("--work-dir", o->work, "keep resumable state here instead of the recipe's work_dir");
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--step-limit", o->step_limit, "stop each stage after this many steps (resume later)");
  cmd->callback([o] {
    ForgeRecipe recipe = load_recipe(o->recipe);
    if (!o->output.empty()) recipe.output = o->output;
    if (!o->work.empty()) recipe.work_dir = o->work;
    check_output(recipe.output, "--output", {o->recipe}, OutputKind::Folder);
    configure_threads(o->threads);
    std::signal(SIGINT, on_interrupt);
    const auto t0 = std::chrono::steady_clock::now();
    ForgeOptions options;
    options.step_limit = o->step_limit;
    options.stop = &g_stop;
    run_forge(recipe, [&](const std::string& line) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      char stamp[32];
      std::snprintf(stamp, sizeof stamp, "[%7.1fs] ", s);
      std::cout << stamp << line << std::endl;
    }, options);
    std::signal(SIGINT, SIG_DFL);
  });
}

}  // namespace mosaic::cli
