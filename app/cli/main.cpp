// mosaic-cli: the headless face of the engine.
#include <iostream>

#include "cli/commands.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"mosaic-cli — serve and study fine-tuned variants of one MoE model"};
  app.require_subcommand(1);
  mosaic::cli::add_inspect_command(app);
  mosaic::cli::add_generate_command(app);
  mosaic::cli::add_logits_command(app);
  mosaic::cli::add_analyze_command(app);
  mosaic::cli::add_consolidate_command(app);
  mosaic::cli::add_merge_command(app);
  mosaic::cli::add_bench_command(app);
  mosaic::cli::add_report_command(app);
  mosaic::cli::add_forge_command(app);
  mosaic::cli::add_eval_command(app);
  mosaic::cli::add_bench_quality_command(app);
  mosaic::cli::add_bench_forward_command(app);
  mosaic::cli::add_bench_analysis_command(app);
  mosaic::cli::add_bench_runtime_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mosaic::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
