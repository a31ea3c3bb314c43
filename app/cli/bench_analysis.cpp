// bench-analysis: expert-distance throughput in GB/s of checkpoint bytes, against a plain
// sequential read() of the same files measured in the same run (both from the page cache, so the
// yardstick is the memory system, not the disk), SHA-256 hashing of the same files, and the check
// every weight passes as it is first read (no NaN or infinity), on one thread as the loader runs it.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "analysis/expert_distance.h"
#include "cli/best_seconds.h"
#include "cli/commands.h"
#include "model/variant_folders.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/sha256.h"
#include "model/synthetic.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

std::vector<fs::path> weight_files(const Family& family) {
  std::vector<fs::path> out;
  for (const Variant& v : family.variants())
    for (const auto& f : v.checkpoint->files()) out.push_back(f->path());
  return out;
}

std::uint64_t read_sequentially(const std::vector<fs::path>& files) {
  std::vector<char> block(8u << 20);
  std::uint64_t total = 0;
  for (const fs::path& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw IoError(f.string(), "", "cannot be opened");
    for (ssize_t n; (n = ::read(fd, block.data(), block.size())) > 0;) total += static_cast<std::uint64_t>(n);
    ::close(fd);
  }
  return total;
}

struct Row {
  std::string name;
  std::int64_t variants = 0, positions = 0;
  std::uint64_t file_bytes = 0, expert_bytes = 0;
  std::uint64_t weight_bytes = 0;
  double read_gbs = 0, sha_gbs = 0, analysis_gbs = 0, finite_gbs = 0;
};

Row bench_family(const std::string& name, const std::vector<fs::path>& dirs, int reps, int threads) {
  Family family;
  open_family(family, dirs);
  const ModelSpec& s = family.spec();
  Row row;
  row.name = name;
  row.variants = static_cast<std::int64_t>(family.size());
  for (const Variant& v : family.variants())
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      if (s.is_sparse(l))
        for (std::int64_t e = 0; e < s.num_experts; ++e) row.expert_bytes += v.checkpoint->expert_bytes(l, e);
  row.positions = s.num_sparse_layers() * s.num_experts;
  const auto files = weight_files(family);
  read_sequentially(files);  // warm the page cache: both measurements then read memory, not disk
  const double t_read = best_seconds(reps, [&] { row.file_bytes = read_sequentially(files); });
  const double t_sha = best_seconds(reps, [&] {
    parallel_for(files.size(), thread_count(threads), [&](std::size_t i, unsigned) { sha256_file(files[i]); });
  });
  const double t_an = best_seconds(reps, [&] { expert_distances(family, {}, threads); });
  const double t_finite = best_seconds(reps, [&] {
    row.weight_bytes = 0;
    for (const Variant& v : family.variants())
      for (const Weight& w : v.checkpoint->weights()) require_finite(w), row.weight_bytes += w.bytes();
  });
  row.finite_gbs = static_cast<double>(row.weight_bytes) / t_finite / 1e9;
  row.read_gbs = static_cast<double>(row.file_bytes) / t_read / 1e9;
  row.sha_gbs = static_cast<double>(row.file_bytes) / t_sha / 1e9;
  row.analysis_gbs = static_cast<double>(row.expert_bytes) / t_an / 1e9;
  return row;
}

}  // namespace

void add_bench_analysis_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-analysis", "Expert-distance GB/s against a sequential read of the same files, same run");
  struct Opts { std::vector<fs::path> variants; bool synthetic = true; std::int64_t layers = 8; int reps = 3, threads = 0; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--variants", o->variants, "a family to measure: checkpoint folders or a folder of variants");
  cmd->add_flag("--synthetic,!--no-synthetic", o->synthetic, "also measure 3 synthetic bf16 Mixtral-architecture variants")->default_val(true);
  add_count_option<std::int64_t>(cmd, "--layers", o->layers, "layers of the synthetic model (8 experts of 4.3 MiB each per layer)", 1, 256);
  add_count_option(cmd, "--reps", o->reps, "repetitions; the best is reported", 1, 1000);
  add_threads_option(cmd, o->threads, "analysis and hashing threads (0 = all cores)");
  cmd->callback([o] {
    std::vector<Row> rows;
    if (!o->variants.empty()) rows.push_back(bench_family(o->variants.front().filename().string(), o->variants, o->reps, o->threads));
    if (o->synthetic) {
      const fs::path dir = fs::temp_directory_path() / ("mosaic-bench-" + std::to_string(std::random_device{}()));
      try {
        const ModelSpec spec = mixtral_like_spec(4000, 512, 1408, o->layers, 8);
        std::vector<fs::path> dirs;
        for (int v = 0; v < 3; ++v) {
          dirs.push_back(dir / ("v" + std::to_string(v)));
          write_synthetic_checkpoint(dirs.back(), spec, DType::BF16, 11 + static_cast<std::uint64_t>(v));
        }
        rows.push_back(bench_family("synthetic-3×bf16", dirs, o->reps, o->threads));
      } catch (...) {
        fs::remove_all(dir);
        throw;
      }
      fs::remove_all(dir);
    }
    std::printf("expert distances vs sequential read() of the same files (page cache warm), %u threads, best of %d\n",
                thread_count(o->threads), o->reps);
    std::printf("%-20s %8s %9s %12s %12s | %10s %10s | %12s %8s | %11s %8s\n", "family", "variants", "positions", "file MiB",
                "expert MiB", "read GB/s", "sha GB/s", "analysis GB/s", "vs read", "finite GB/s", "vs read");
    for (const Row& r : rows)
      std::printf("%-20s %8lld %9lld %12.1f %12.1f | %10.2f %10.2f | %12.2f %7.0f%% | %11.2f %7.0f%%\n", r.name.c_str(),
                  static_cast<long long>(r.variants), static_cast<long long>(r.positions), r.file_bytes / 0x1p20,
                  r.expert_bytes / 0x1p20, r.read_gbs, r.sha_gbs, r.analysis_gbs, 100.0 * r.analysis_gbs / r.read_gbs, r.finite_gbs,
                  100.0 * r.finite_gbs / r.read_gbs);
  });
}

}  // namespace mosaic::cli
