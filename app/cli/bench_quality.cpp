// bench-quality: the Multi-MoE paper's Table 4 on a forged family — the target variant's held-out
// perplexity on its own domain alone, under the averaging merge, and served consolidated (with and
// without non-expert reconfiguration) as 2, 3, 4… variants share one budget.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include "analysis/merge.h"
#include "cli/commands.h"
#include "model/variant_folders.h"
#include "cli/quality.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/machine.h"
#include "model/family.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

struct Row {
  std::string method, variants;
  std::int64_t served = 1, resident = -1, total = -1;  // resident / total experts (-1: all of one model)
  Perplexity p;
};

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string join(const std::vector<std::string>& names, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + names[i];
  return s;
}

void write_outputs(const fs::path& out, const std::vector<Row>& rows, const std::string& target, const std::string& domain,
                   double alone, const nlohmann::json& meta) {
  fs::create_directories(out);
  std::ostringstream md, csv, html;
  md << "| served | method | variants | resident experts | perplexity | vs. alone |\n|---:|---|---|---:|---:|---:|\n";
  csv << "served,method,variants,resident_experts,total_experts,perplexity,mean_nll,predictions\n";
  html << "<!doctype html><meta charset=utf-8><title>Mosaic quality: " << target << "</title>"
       << "<style>body{font:14px sans-serif;margin:2em}td,th{padding:4px 10px;text-align:right}td:nth-child(2),td:nth-child(3){text-align:left}"
       << "table{border-collapse:collapse}tr:nth-child(even){background:#f3f3f3}</style>"
       << "<h1>Output quality as variants share one GPU</h1><p>Held-out perplexity of <b>" << target << "</b> on the <b>" << domain
       << "</b> domain (lower is better), as in Table 4 of Imani et al. (ICML 2025). " << meta["machine"].get<std::string>() << ", "
       << meta["date"].get<std::string>() << ".</p><table><tr><th>served</th><th>method</th><th>variants</th><th>resident experts</th><th>perplexity</th><th>vs. alone</th></tr>";
  nlohmann::json j = meta;
  for (const Row& r : rows) {
    const std::string resident = r.resident < 0 ? "all" : std::to_string(r.resident) + " / " + std::to_string(r.total);
    const std::string delta = (r.p.perplexity >= alone ? "+" : "") + fixed(100.0 * (r.p.perplexity / alone - 1.0), 1) + "%";
    md << "| " << r.served << " | " << r.method << " | " << r.variants << " | " << resident << " | " << fixed(r.p.perplexity, 2) << " | " << delta << " |\n";
    csv << r.served << "," << r.method << ",\"" << r.variants << "\"," << r.resident << "," << r.total << "," << r.p.perplexity << ","
        << r.p.mean_nll << "," << r.p.predictions << "\n";
    html << "<tr><td>" << r.served << "</td><td>" << r.method << "</td><td>" << r.variants << "</td><td>" << resident << "</td><td>"
         << fixed(r.p.perplexity, 2) << "</td><td>" << delta << "</td></tr>";
    j["rows"].push_back({{"served", r.served}, {"method", r.method}, {"variants", r.variants}, {"resident_experts", r.resident},
                         {"total_experts", r.total}, {"perplexity", r.p.perplexity}, {"mean_nll", r.p.mean_nll},
                         {"predictions", r.p.predictions}, {"windows", r.p.windows}});
  }
  html << "</table>";
  const std::pair<const char*, std::string> files[] = {
      {"quality.md", md.str()}, {"quality.csv", csv.str()}, {"report.html", html.str()}, {"quality.json", j.dump(2) + "\n"}};
  for (const auto& [name, text] : files) write_file_atomically(out / name, [&](std::ostream& o) { o << text; });
}

}  // namespace

void add_bench_quality_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-quality",
                                 "Table 4 of the Multi-MoE paper on a forged family: a target's held-out perplexity alone, averaged, "
                                 "consolidated and without reconfiguration, as more variants are served together");
  struct Opts {
    fs::path family, out;
    std::string target, domain;
    std::vector<std::string> others;
    double resident_fraction = 0.5;
    std::int64_t window = 128, max_windows = 64;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--family", o->family, "folder of the family's variant folders (forge's output)")->required();
  cmd->add_option("--target", o->target, "the variant whose quality is measured (model A)")->required();
  cmd->add_option("--others", o->others, "the variants served with it, in the order they are added (B C D …)")->required();
  cmd->add_option("--domain", o->domain, "held-out text to score (default: the target's name)");
  cmd->add_option("--resident-fraction", o->resident_fraction, "share of the served variants' experts kept resident")->default_val(0.5);
  cmd->add_option("--window", o->window, "tokens per scored window")->default_val(128);
  cmd->add_option("--max-windows", o->max_windows, "windows spread over the held-out text (0 = all)")->default_val(64);
  cmd->add_option("--out", o->out, "write quality.md, quality.csv, quality.json and report.html here");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd->callback([o] {
    if (!(o->resident_fraction > 0 && o->resident_fraction <= 1))
      throw InvalidArgument("--resident-fraction", std::to_string(o->resident_fraction), "must be in (0, 1]");
    configure_threads(o->threads);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string domain = o->domain.empty() ? o->target : o->domain;
    const auto ids = heldout_ids(o->family / o->target, domain);
    std::vector<Row> rows;
    auto report = [&](const Row& r) {
      std::cout << "  " << r.served << "  " << r.method << " (" << r.variants << ")  perplexity " << fixed(r.p.perplexity, 3) << std::endl;
      rows.push_back(r);
    };
    std::vector<std::string> names{o->target};
    names.insert(names.end(), o->others.begin(), o->others.end());
    for (const std::string& name : names)
      report({"alone", name, 1, -1, -1, checkpoint_perplexity(o->family / name, ids, o->window, o->max_windows)});
    for (const std::string& extra : std::vector<std::string>{"base", "esft-" + o->target})
      if (fs::exists(o->family / extra / "config.json"))
        report({"alone", extra, 1, -1, -1, checkpoint_perplexity(o->family / extra, ids, o->window, o->max_windows)});
    const double alone = rows.front().p.perplexity;

    for (std::size_t n = 2; n <= names.size(); ++n) {
      // Others first, target last: with no reconfiguration, layout variant 0's non-expert weights
      // (another model's) stay resident while the target is served. Both runs share the layout.
      std::vector<fs::path> dirs;
      for (std::size_t i = 1; i < n; ++i) dirs.push_back(o->family / names[i]);
      dirs.push_back(o->family / o->target);
      Family family;
      open_family(family, dirs);
      const std::int64_t total = static_cast<std::int64_t>(n) * family.spec().num_sparse_layers() * family.spec().num_experts;
      const std::string served = join(names, n);

      const fs::path averaged = fs::temp_directory_path() / ("mosaic-avg-" + std::to_string(::getpid()) + "-" + std::to_string(n));
      write_averaged(family, averaged);
      Row avg{"averaging", served, static_cast<std::int64_t>(n), -1, -1, checkpoint_perplexity(averaged, ids, o->window, o->max_windows)};
      std::error_code ec;
      fs::remove_all(averaged, ec);
      report(avg);

      ServingArgs args;
      args.variants = dirs;
      args.target = o->target;
      args.capacity = std::max<std::int64_t>(1, std::llround(o->resident_fraction * static_cast<double>(total)));
      for (bool reconfig : {true, false}) {
        args.no_reconfig = !reconfig;
        const auto session = open_serving(args);
        report({reconfig ? "consolidated" : "no-reconfig", served, static_cast<std::int64_t>(n), args.capacity, total,
                served_perplexity(*session, ids, o->window, o->max_windows)});
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "bench-quality: " << rows.size() << " measurements in " << fixed(seconds, 1) << " s; alone " << fixed(alone, 3) << "\n";
    if (!o->out.empty()) {
      const nlohmann::json meta = {{"target", o->target}, {"domain", domain}, {"resident_fraction", o->resident_fraction},
                                   {"window", o->window}, {"max_windows", o->max_windows}, {"machine", machine_description()},
                                   {"date", utc_timestamp()}, {"rows", nlohmann::json::array()}};
      write_outputs(o->out, rows, o->target, domain, alone, meta);
      std::cout << "wrote " << (o->out / "quality.md").string() << ", quality.csv, quality.json, report.html\n";
    }
  });
}

}  // namespace mosaic::cli
