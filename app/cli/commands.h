#pragma once
// Each mosaic-cli subcommand registers itself on the app; its callback throws mosaic::Error on bad
// input, which main() reports.
#include <CLI/CLI.hpp>

namespace mosaic::cli {
void add_inspect_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_bench_forward_command(CLI::App& app);
void add_analyze_command(CLI::App& app);
void add_consolidate_command(CLI::App& app);
void add_plan_virtual_command(CLI::App& app);
void add_routing_command(CLI::App& app);
void add_merge_command(CLI::App& app);
void add_bench_analysis_command(CLI::App& app);
void add_bench_runtime_command(CLI::App& app);
void add_bench_cuda_command(CLI::App& app);
void add_bench_esft_command(CLI::App& app);
void add_bench_device_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_runs_command(CLI::App& app);
void add_forge_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_bench_quality_command(CLI::App& app);
void add_delta_command(CLI::App& app);
void add_esft_command(CLI::App& app);
void add_bench_delta_command(CLI::App& app);
void add_bench_deltas_command(CLI::App& app);
void add_bench_host_command(CLI::App& app);
void add_serve_command(CLI::App& app);

// The --threads option every command that computes on the CPU takes: 0 for one per core, never negative.
CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& what = "CPU threads (0 = all cores)");
// A size or count option bounded to [lo, hi]: anything else is a mistake on the command line (exit 2).
template <class T>
CLI::Option* add_count_option(CLI::App* cmd, const std::string& name, T& value, const std::string& what, T lo, T hi) {
  return cmd->add_option(name, value, what)->default_val(value)->check(CLI::Range(lo, hi));
}
void add_bench_serve_command(CLI::App& app);
}  // namespace mosaic::cli
