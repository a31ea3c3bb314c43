// bench-host: the host tier on a family larger than a small host budget. A synthetic Mixtral-
// architecture family (4 variants, half of every variant's experts shared with the base byte for
// byte, about 6 GB on disk) is served by this binary in child processes, each under a device budget
// and one host budget, and each child's peak resident memory is read from wait4's rusage: decode
// tokens/s, hits, misses from RAM and from disk, logits compared with the run that holds everything in
// RAM, and the files' sequential read rate in the same run.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "common/atomic_file.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "common/stopwatch.h"
#include "model/safetensors.h"
#include "model/synthetic.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

struct Child {
  int code = -1;
  double seconds = 0;
  std::uint64_t peak_rss = 0;  // bytes
};

// Runs this binary with `args` (stdout and stderr to `log`), waiting for it with wait4: its peak RSS.
Child run_self(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<char*> argv;
  std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw IoError("bench-host", "", "cannot start a child process");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  Child c;
  c.seconds = seconds_since(t0);
  c.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  c.peak_rss = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
  return c;
}

// Drops the page cache where this process may (root on a kernel that lets it): the first reads of
// each run then come from the disk. Says whether it did.
bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

double sequential_read_gbs(const std::vector<fs::path>& files) {
  std::vector<char> block(8u << 20);
  std::uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const fs::path& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw IoError(f.string(), "", "cannot be opened");
    for (ssize_t n; (n = ::read(fd, block.data(), block.size())) > 0;) total += static_cast<std::uint64_t>(n);
    ::close(fd);
  }
  return static_cast<double>(total) / seconds_since(t0) / 1e9;
}

struct Opts {
  fs::path dir = "bench-host-family";
  std::vector<std::string> host_budgets{"all", "2GiB", "512MiB"};
  std::string budget = "1GiB";
  int layers = 8, new_tokens = 32;
  bool write_only = false, drop_caches = true;
  fs::path json;
};

void run_bench_host(const Opts& o) {
  const ModelSpec spec = mixtral_like_spec(32000, 1024, 3584, o.layers, 8);
  const auto t_write = std::chrono::steady_clock::now();
  write_synthetic_family(o.dir, spec, DType::BF16, 4, [&](std::int64_t, std::int64_t e) { return e < spec.num_experts / 2; }, 7);
  std::vector<fs::path> files;
  std::uint64_t file_bytes = 0;
  for (int v = 0; v < 4; ++v) {
    files.push_back(o.dir / ("v" + std::to_string(v)) / "model.safetensors");
    file_bytes += fs::file_size(files.back());
  }
  std::printf("bench-host: 4 variants of a %d-layer Mixtral-architecture model (hidden 1024, 8 experts of 3584), bf16, half the experts "
              "shared byte for byte; %.2f GB on disk in %s (%.0f s to write or find)\n",
              o.layers, static_cast<double>(file_bytes) / 1e9, o.dir.string().c_str(), seconds_since(t_write));
  if (o.write_only) return;

  const bool dropped = o.drop_caches && drop_page_cache();
  const double read_gbs = sequential_read_gbs(files);
  std::printf("  sequential read of the files: %.2f GB/s (%s)\n", read_gbs, dropped ? "page cache dropped first: from the disk" : "from the page cache");

  // The requests: one prompt a target for logits; a decode on v1.
  const fs::path work = o.dir / "runs";
  fs::create_directories(work);
  std::vector<std::int64_t> prompt;
  for (int i = 0; i < 64; ++i) prompt.push_back((i * 7919 + 13) % 32000);
  {
    std::ofstream r(work / "requests.jsonl");
    for (int v = 0; v < 4; ++v) r << nlohmann::json{{"target", "v" + std::to_string(v)}, {"ids", prompt}}.dump() << "\n";
  }
  std::string ids;
  for (std::size_t i = 0; i < 16; ++i) ids += (i ? "," : "") + std::to_string(prompt[i]);
  std::vector<std::string> variants;
  for (int v = 0; v < 4; ++v) variants.push_back((o.dir / ("v" + std::to_string(v))).string());

  // The fixed overhead: the same command's peak RSS on a family whose weights are nothing (one layer
  // of width 64), under the same device budget: the process, its libraries and thread stacks, the
  // engine's buffers.
  const fs::path tiny = work / "overhead-family";
  write_synthetic_family(tiny, mixtral_like_spec(512, 64, 128, 1, 8), DType::BF16, 2, [](std::int64_t, std::int64_t) { return false; }, 3);
  const Child base = run_self({"generate", "--variants", (tiny / "v0").string(), (tiny / "v1").string(), "--target", "v1", "--ids", "1,2,3,4,5,6,7,8",
                               "--max-new", std::to_string(o.new_tokens), "--budget", o.budget},
                              work / "overhead.log");
  if (base.code != 0) throw IoError((work / "overhead.log").string(), "", "the overhead run failed", "read the log");
  const std::uint64_t overhead = base.peak_rss;
  std::printf("  fixed overhead (the same generate on a one-layer family of width 64): %s peak RSS\n", format_bytes(overhead).c_str());
  std::printf("  hidden: of the logits run's disk time (4 variants' requests one at a time), the share the reader thread took ahead\n");
  std::printf("  bound: host budget (or every distinct byte) + what the device budget holds, in fp32 on the CPU backend (2 x its bf16\n"
              "  price) + the overhead\n");

  nlohmann::ordered_json out = {{"file_bytes", file_bytes}, {"sequential_read_GBps", read_gbs}, {"page_cache_dropped", dropped},
                                {"device_budget", o.budget}, {"overhead_peak_rss", overhead}, {"rows", nlohmann::ordered_json::array()}};
  std::printf("\n  %-8s %11s %11s %11s %7s %6s %5s %9s %5s %6s %9s %6s %s\n", "host", "RSS gen", "RSS logits", "bound", "dec t/s", "hits",
              "RAM", "disk", "GB/s", "hidden", "logits", "within", "");
  std::vector<float> first_logits;
  for (const std::string& host : o.host_budgets) {
    auto args = [&](std::vector<std::string> a) {
      a.insert(a.end(), {"--budget", o.budget});
      if (host != "all") a.insert(a.end(), {"--host-budget", host});
      return a;
    };
    std::vector<std::string> gen{"generate", "--variants"};
    gen.insert(gen.end(), variants.begin(), variants.end());
    gen.insert(gen.end(), {"--target", "v1", "--ids", ids, "--max-new", std::to_string(o.new_tokens), "--stats", (work / ("gen-" + host + ".json")).string()});
    std::vector<std::string> log{"logits", "--variants"};
    log.insert(log.end(), variants.begin(), variants.end());
    log.insert(log.end(), {"--requests", (work / "requests.jsonl").string(), "--out", (work / ("logits-" + host + ".safetensors")).string(),
                            "--max-sequences", "1", "--stats", (work / ("logits-" + host + ".json")).string()});
    if (o.drop_caches) drop_page_cache();
    const Child g = run_self(args(gen), work / ("gen-" + host + ".log"));
    if (o.drop_caches) drop_page_cache();
    const Child l = run_self(args(log), work / ("logits-" + host + ".log"));
    if (g.code != 0 || l.code != 0)
      throw IoError((work / (g.code != 0 ? "gen-" + host + ".log" : "logits-" + host + ".log")).string(), "", "the child run failed",
                    "read the log");
    const auto stats = nlohmann::json::parse(std::ifstream(work / ("gen-" + host + ".json")));
    const auto& r = stats["requests"][0];
    const double tpot = r["tpot_seconds"].get<double>();
    const std::int64_t disk = stats.value("disk_loads", std::int64_t{0});
    const double disk_s = stats.value("disk_seconds", 0.0);
    const std::uint64_t disk_b = stats.value("disk_bytes", std::uint64_t{0});
    // Logits of every request against the run holding everything.
    std::vector<float> all;
    {
      const SafetensorsFile f(work / ("logits-" + host + ".safetensors"));
      for (int i = 0; i < 4; ++i) {
        const TensorInfo* t = f.find("logits." + std::to_string(i));
        if (!t) throw FormatError(f.path().string(), "logits." + std::to_string(i), "is absent");
        const auto bytes = f.data(*t);
        const auto* p = reinterpret_cast<const float*>(bytes.data());
        all.insert(all.end(), p, p + bytes.size() / 4);
      }
    }
    if (first_logits.empty()) first_logits = all;
    const bool same = all == first_logits;
    const auto& h = stats["host"];
    // Four requests of four variants one after another: the tier reads each waiting one's set ahead.
    const auto logit_stats = nlohmann::json::parse(std::ifstream(work / ("logits-" + host + ".json")));
    const double hidden = logit_stats["host"]["disk_time_hidden"].get<double>();
    const std::uint64_t host_bytes = h["budget"].is_null() ? h["distinct_bytes"].get<std::uint64_t>() : h["budget"].get<std::uint64_t>();
    const std::uint64_t device_held = 2 * stats["budget"]["peak"].get<std::uint64_t>();  // bf16-priced, fp32-held
    const std::uint64_t bound = host_bytes + device_held + overhead;
    const bool within = std::max(g.peak_rss, l.peak_rss) <= bound;
    const std::int64_t loads = stats.value("loads", std::int64_t{0});
    std::printf("  %-8s %11s %11s %11s %7.1f %6lld %5lld %9lld %5.2f %5.0f%% %9s %6s\n", host.c_str(), format_bytes(g.peak_rss).c_str(),
                format_bytes(l.peak_rss).c_str(), format_bytes(bound).c_str(), 1.0 / tpot,
                static_cast<long long>(stats["hits"].get<std::int64_t>()), static_cast<long long>(loads - disk), static_cast<long long>(disk),
                disk_s > 0 ? static_cast<double>(disk_b) / disk_s / 1e9 : 0.0, 100.0 * hidden,
                same ? "identical" : "DIFFER", within ? "yes" : "NO");
    out["rows"].push_back({{"host_budget", host}, {"peak_rss_generate", g.peak_rss}, {"peak_rss_logits", l.peak_rss}, {"bound", bound},
                           {"within_bound", within}, {"decode_tokens_per_s", 1.0 / tpot}, {"hits", stats["hits"]}, {"misses", stats["misses"]},
                           {"loads", loads}, {"disk_loads", disk}, {"disk_bytes", disk_b}, {"disk_seconds", disk_s},
                           {"disk_time_hidden_logits", hidden}, {"host_resident_peak", h["resident_peak"]}, {"logits_identical", same},
                           {"generate_seconds", g.seconds}, {"logits_seconds", l.seconds}});
  }
  if (!o.json.empty()) write_file_atomically(o.json, [&](std::ostream& f) { f << out.dump(2) << "\n"; });
}

}  // namespace

void add_bench_host_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-host", "The host tier: a ~6 GB synthetic family served under a device budget and several host "
                                               "budgets, each in a child process: peak RSS, decode tokens/s, hits, misses from RAM and disk");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--dir", o->dir, "where the synthetic family is written (reused when present)")->default_val("bench-host-family");
  cmd->add_option("--host-budget", o->host_budgets, "host budgets to run (\"all\": no limit)")->default_str("all 2GiB 512MiB");
  cmd->add_option("--budget", o->budget, "the device budget of every run")->default_val("1GiB");
  add_count_option(cmd, "--layers", o->layers, "layers of the synthetic model (about 0.2 GB each per variant)", 1, 64);
  add_count_option(cmd, "--max-new", o->new_tokens, "tokens each decode run generates", 2, 1024);
  cmd->add_flag("--write-only", o->write_only, "write the family (unless present) and stop");
  cmd->add_flag("--drop-caches,!--no-drop-caches", o->drop_caches, "drop the page cache before each run where permitted (root)")->default_val(true);
  cmd->add_option("--json", o->json, "also write the measurements here");
  cmd->callback([o] {
    check_output(o->json, "--json", {});
    check_output(o->dir, "--dir", {}, OutputKind::Folder);
    run_bench_host(*o);
  });
}

}  // namespace mosaic::cli
