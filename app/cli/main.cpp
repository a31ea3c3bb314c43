// mosaic-cli: the headless face of the engine. Exit codes: 0 done, 2 a mistake of the caller's
// (bad arguments, bad input files), 3 an internal error.
#include <filesystem>
#include <iostream>
#include <new>
#include <algorithm>
#include <string>
#include <vector>

#include "common/machine.h"
#include "cli/commands.h"
#include "common/edit_distance.h"
#include "common/error.h"

namespace {

// The first argument names no command: say so, with the commands and the nearest one.
int unknown_command(const CLI::App& app, const std::string& name) {
  std::string list;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    list += (list.empty() ? "" : ", ") + sub->get_name();
    names.push_back(sub->get_name());
  }
  const std::string_view nearest = mosaic::nearest_name(name, std::vector<std::string_view>(names.begin(), names.end()));
  std::cerr << "error: '" << name << "' is not a mosaic-cli command";
  if (!nearest.empty()) std::cerr << " (did you mean '" << nearest << "'?)";
  std::cerr << "\n  commands: " << list << "\n  mosaic-cli COMMAND --help describes one\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mosaic-cli — serve and study fine-tuned variants of one MoE model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mosaic-cli ") + mosaic::mosaic_version());
  mosaic::cli::add_inspect_command(app);
  mosaic::cli::add_generate_command(app);
  mosaic::cli::add_serve_command(app);
  mosaic::cli::add_logits_command(app);
  mosaic::cli::add_analyze_command(app);
  mosaic::cli::add_consolidate_command(app);
  mosaic::cli::add_plan_virtual_command(app);
  mosaic::cli::add_routing_command(app);
  mosaic::cli::add_merge_command(app);
  mosaic::cli::add_delta_command(app);
  mosaic::cli::add_bench_command(app);
  mosaic::cli::add_report_command(app);
  mosaic::cli::add_runs_command(app);
  mosaic::cli::add_forge_command(app);
  mosaic::cli::add_eval_command(app);
  mosaic::cli::add_bench_quality_command(app);
  mosaic::cli::add_bench_forward_command(app);
  mosaic::cli::add_bench_analysis_command(app);
  mosaic::cli::add_bench_runtime_command(app);
  mosaic::cli::add_bench_serve_command(app);
  mosaic::cli::add_bench_cuda_command(app);
  mosaic::cli::add_bench_device_command(app);
  mosaic::cli::add_bench_delta_command(app);
  if (argc > 1 && argv[1][0] != '-') {
    const auto subs = app.get_subcommands({});
    if (std::none_of(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->check_name(argv[1]); }))
      return unknown_command(app, argv[1]);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the message, or the help and the version asked for
    return code == 0 ? 0 : 2;
  } catch (const mosaic::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the file system refuses (a symbolic-link loop, no permission): their
    // input, not Mosaic's fault.
    std::cerr << "error: " << e.path1().string() << ": " << e.code().message() << " (check the path)\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory: an input asks for more than this machine has (check sizes in the config and the flags)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
