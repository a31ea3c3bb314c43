// bench-quality: the Multi-MoE paper's Table 4 on a forged family — the target variant's held-out
// perplexity on its own domain alone, under the averaging merge, and served consolidated (with and
// without non-expert reconfiguration) as 2, 3, 4… variants share one budget — and beside it DeltaMoE's
// delta folders, with consolidation given each delta row's device bytes, and SwapMoE's virtual experts
// (planned and uniform counts) at those bytes too: quality against bytes.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <unistd.h>

#include "analysis/delta_folder.h"
#include "analysis/delta_within.h"
#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "analysis/merge.h"
#include "analysis/virtual_plan.h"
#include "cli/analyzed.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "model/variant_folders.h"
#include "cli/quality.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/machine.h"
#include "model/family.h"
#include "runtime/threads.h"
#include "serving/layout_serving.h"
#include "serving/strategy.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

struct Row {
  std::string method, variants;
  std::int64_t served = 1, resident = -1, total = -1;  // resident / total experts (-1: all of one model)
  Perplexity p;
  std::uint64_t bytes = 0;  // weights on the device (Runtime::weight_bytes)
};

// DeltaMoE's formats, smallest first (docs/delta-format.md).
struct DeltaMethod {
  const char* name;
  DeltaFormat format;
};
constexpr DeltaMethod kDeltaMethods[] = {
    {"delta 2-bit 2:4", {2, true, 128}}, {"delta 4-bit 2:4", {4, true, 128}}, {"delta 4-bit", {4, false, 128}}};

// Delta folders served as the delta strategy serves them: the base's experts pinned, every packed
// delta pinned beside them (no budget: quality does not depend on what misses). Or as hybrid serves
// them, with `shared` positions, the most similar, taking the base's copy instead of their deltas.
std::unique_ptr<ServingSession> open_delta_serving(const std::vector<fs::path>& folders, const std::string& target, const fs::path& scratch,
                                                   std::optional<std::int64_t> shared = std::nullopt) {
  auto s = std::make_unique<ServingSession>();
  open_family(s->family, folders);
  s->store = std::make_unique<HostStore>(s->family);
  const auto analysis = analyzed(s->family, {});
  const Deployment d(StrategyConfig{.kind = shared ? StrategyKind::Hybrid : StrategyKind::Delta, .capacity = shared.value_or(0)}, s->family,
                     *s->store, *analysis, scratch);
  s->runtime = d.partitions().front().runtime;
  s->engine = std::make_unique<Engine>(s->runtime);
  s->target = target;
  return s;
}

// Multi-MoE's consolidation with every expert resident, as the paper sizes it to a budget: the
// `shared` most similar positions keep one copy serving every variant, the others each variant's own.
std::unique_ptr<ServingSession> open_consolidated_resident(const std::vector<fs::path>& dirs, const std::string& target, std::int64_t shared) {
  auto s = std::make_unique<ServingSession>();
  open_family(s->family, dirs);
  const auto analysis = analyzed(s->family, {default_cache_dir(), 0, {}});
  s->layout = make_layout(s->family, analysis->sha256, plan_consolidation(analysis->distances, shared, Policy::RoundRobin));
  const std::vector<int> to_store = match_layout(s->layout, s->family, analysis->sha256, "planned layout");
  s->store = std::make_unique<HostStore>(s->family);
  RuntimeConfig config = layout_config(s->layout, to_store, *s->store, s->family, {});
  const ModelSpec& spec = s->store->spec();
  for (std::int64_t l = 0; l < spec.num_layers; ++l)
    for (std::int64_t e = 0; e < spec.num_experts && spec.is_sparse(l); ++e)
      if (s->layout.plan.resident(l, e) < 0)
        for (int t = 0; t < s->store->targets(); ++t) config.pinned.push_back({l, e, t});
  s->runtime = std::make_shared<Runtime>(*s->store, std::move(config));
  s->engine = std::make_unique<Engine>(s->runtime);
  s->target = target;
  return s;
}

// Virtual experts as the virtual-experts strategy serves them, planned (or uniform) for weights of
// at most `weights` bytes: the budget is those and the reserve, so that the runtime's weight bytes
// (non-expert set, resident experts, staging slots) are comparable with the other rows'.
std::unique_ptr<ServingSession> open_virtual_serving(const std::vector<fs::path>& dirs, const std::string& target, const VirtualCurves& curves,
                                                     std::uint64_t weights, bool uniform) {
  auto s = std::make_unique<ServingSession>();
  open_family(s->family, dirs);
  s->store = std::make_unique<HostStore>(s->family);
  const auto analysis = analyzed(s->family, {default_cache_dir(), 0, {}});
  VirtualPlanOptions o;
  o.reserve.miss_slots = 0;
  std::uint64_t reserve = 0;
  for (const ReserveItem& r : plan_reserve(s->store->spec(), s->store->expert_bytes() + s->store->max_delta_bytes(), o.reserve)) reserve += r.bytes;
  o.budget_bytes = weights + reserve;
  s->layout = plan_virtual(s->family, analysis->sha256, *s->store, curves, o, &analysis->distances, uniform);
  s->runtime = std::make_shared<Runtime>(*s->store, layout_config(s->layout, s->store->indices(s->family), *s->store, s->family,
                                                                   {.budget = o.budget_bytes, .reserve = o.reserve}));
  s->engine = std::make_unique<Engine>(s->runtime);
  s->target = target;
  return s;
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

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

// Perplexity against device bytes for the rows serving `served` variants, one line per method, as
// an SVG: the comparison at equal bytes that the table lists row by row. `alone_bytes` marks every
// served variant fully resident, at the target's own perplexity.
std::string quality_chart(const std::vector<Row>& rows, std::int64_t served, double alone, std::uint64_t alone_bytes) {
  // The delta formats and the hybrid shares are one line each, every point labelled with its format
  // or share, so the bytes-for-quality trade within a method reads off the same chart.
  struct Point {
    double x, y;
    std::string label;
    bool operator<(const Point& o) const { return x < o.x; }
  };
  std::map<std::string, std::vector<Point>> lines;
  for (const Row& r : rows) {
    if (r.served != served) continue;
    if (r.method.starts_with("delta "))
      lines["delta"].push_back({mib(r.bytes), r.p.perplexity, r.method.substr(6)});
    else if (r.method.starts_with("hybrid")) {
      const auto open = r.method.find('('), of = r.method.find(" of ");
      const std::string shared = open != std::string::npos && of != std::string::npos ? r.method.substr(open + 1, of - open - 1) : "";
      lines["hybrid (4-bit 2:4)"].push_back({mib(r.bytes), r.p.perplexity, shared.empty() ? "" : shared + " shared"});
    } else
      lines[r.method].push_back({mib(r.bytes), r.p.perplexity, ""});
  }
  lines["each alone"].push_back({mib(alone_bytes), alone, ""});
  // The y axis stops at 1.3× the target alone, where the methods worth comparing lie; a point past
  // it (no reconfiguration, often averaging) is drawn on the top edge as a triangle with its value.
  const double cap = alone * 1.3;
  double x0 = alone_bytes, x1 = 0, y0 = alone, y1 = alone;
  for (auto& [method, points] : lines) {
    std::sort(points.begin(), points.end());
    for (const auto& [x, y, label] : points) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      if (y <= cap) y1 = std::max(y1, y);
    }
  }
  x0 = std::floor(x0 * 0.8);
  x1 *= 1.05;
  const double pad = std::max(0.05 * (y1 - y0), 0.1);
  y0 -= pad;
  y1 += 2 * pad;
  const double W = 960, H = 420, L = 64, R = 240, T = 20, B = 48;
  auto px = [&](double x) { return L + (W - L - R) * (x - x0) / (x1 - x0); };
  auto py = [&](double y) { return T + (H - T - B) * (1.0 - (std::min(y, y1) - y0) / (y1 - y0)); };
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' font-size='12'>"
      << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B << "' fill='none' stroke='#888'/>";
  for (int i = 0; i <= 4; ++i) {
    const double x = x0 + (x1 - x0) * i / 4, y = y0 + (y1 - y0) * i / 4;
    svg << "<text x='" << px(x) << "' y='" << H - B + 16 << "' text-anchor='middle'>" << fixed(x, 1) << "</text>"
        << "<text x='" << L - 6 << "' y='" << py(y) + 4 << "' text-anchor='end'>" << fixed(y, 2) << "</text>"
        << "<line x1='" << L << "' x2='" << W - R << "' y1='" << py(y) << "' y2='" << py(y) << "' stroke='#eee'/>";
  }
  svg << "<text x='" << (L + W - R) / 2 << "' y='" << H - 8 << "' text-anchor='middle'>weights on the device (MiB), " << served
      << " variants served</text><text transform='rotate(-90)' x='" << -(T + H - B) / 2 << "' y='16' text-anchor='middle'>perplexity (lower is better)</text>";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#e377c2", "#7f7f7f", "#bcbd22"};
  constexpr int kColors = sizeof colors / sizeof *colors;
  int i = 0, over = 0;  // points over the top, each labelled a line lower than the last
  for (const auto& [method, points] : lines) {
    const char* c = colors[i % kColors];
    const bool below = method == "delta";  // its labels under the line, the others' over theirs
    std::string poly;
    for (const auto& [x, y, label] : points) {
      poly += fixed(px(x), 1) + "," + fixed(py(y), 1) + " ";
      if (y > y1) {
        svg << "<path d='M" << px(x) - 5 << ',' << T + 9 << " l5,-8 l5,8 z' fill='" << c << "'/><text x='" << px(x) + 8 << "' y='" << T + 12 + 12 * over
            << "' font-size='10' fill='" << c << "'>" << method << " " << fixed(y, 2) << " ↑</text>";
        ++over;
        continue;
      }
      svg << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='4' fill='" << c << "'/>";
      if (!label.empty())
        svg << "<text transform='translate(" << px(x) + 4 << ',' << py(y) + (below ? 12 : -8) << ") rotate(" << (below ? 30 : -30)
            << ")' font-size='10' fill='" << c << "'>" << label << "</text>";
    }
    if (points.size() > 1) svg << "<polyline points='" << poly << "' fill='none' stroke='" << c << "' stroke-width='2'/>";
    svg << "<rect x='" << W - R + 16 << "' y='" << T + 18 * i << "' width='12' height='12' fill='" << c << "'/>"
        << "<text x='" << W - R + 34 << "' y='" << T + 18 * i + 10 << "'>" << method << "</text>";
    ++i;
  }
  svg << "</svg>";
  return svg.str();
}

void write_outputs(const fs::path& out, const std::vector<Row>& rows, const std::string& target, const std::string& domain,
                   double alone, const std::string& chart, const nlohmann::json& meta) {
  fs::create_directories(out);
  std::ostringstream md, csv, html;
  md << "| served | method | variants | resident experts | weights (MiB) | perplexity | vs. alone |\n|---:|---|---|---:|---:|---:|---:|\n";
  csv << "served,method,variants,resident_experts,total_experts,weight_bytes,perplexity,mean_nll,predictions\n";
  html << "<!doctype html><meta charset=utf-8><title>Mosaic quality: " << target << "</title>"
       << "<style>body{font:14px sans-serif;margin:2em}td,th{padding:4px 10px;text-align:right}td:nth-child(2),td:nth-child(3){text-align:left}"
       << "table{border-collapse:collapse}tr:nth-child(even){background:#f3f3f3}</style>"
       << "<h1>Output quality as variants share one GPU</h1><p>Held-out perplexity of <b>" << target << "</b> on the <b>" << domain
       << "</b> domain (lower is better), as in Table 4 of Imani et al. (ICML 2025), beside DeltaMoE's compressed deltas, with "
       << "consolidation also given each delta row's device bytes, and SwapMoE's virtual experts (counts planned on calibration text, and uniform) at those bytes. " << meta["machine"].get<std::string>() << ", "
       << meta["date"].get<std::string>() << ".</p>" << chart
       << "<table><tr><th>served</th><th>method</th><th>variants</th><th>resident experts</th><th>weights (MiB)</th><th>perplexity</th><th>vs. alone</th></tr>";
  nlohmann::json j = meta;
  for (const Row& r : rows) {
    const std::string resident = r.resident < 0 ? "all" : std::to_string(r.resident) + " / " + std::to_string(r.total);
    const std::string delta = (r.p.perplexity >= alone ? "+" : "") + fixed(100.0 * (r.p.perplexity / alone - 1.0), 1) + "%";
    md << "| " << r.served << " | " << r.method << " | " << r.variants << " | " << resident << " | " << fixed(mib(r.bytes), 2) << " | "
       << fixed(r.p.perplexity, 2) << " | " << delta << " |\n";
    csv << r.served << "," << r.method << ",\"" << r.variants << "\"," << r.resident << "," << r.total << "," << r.bytes << ","
        << r.p.perplexity << "," << r.p.mean_nll << "," << r.p.predictions << "\n";
    html << "<tr><td>" << r.served << "</td><td>" << r.method << "</td><td>" << r.variants << "</td><td>" << resident << "</td><td>"
         << fixed(mib(r.bytes), 2) << "</td><td>" << fixed(r.p.perplexity, 2) << "</td><td>" << delta << "</td></tr>";
    j["rows"].push_back({{"served", r.served}, {"method", r.method}, {"variants", r.variants}, {"resident_experts", r.resident},
                         {"total_experts", r.total}, {"weight_bytes", r.bytes}, {"perplexity", r.p.perplexity}, {"mean_nll", r.p.mean_nll},
                         {"predictions", r.p.predictions}, {"windows", r.p.windows}});
  }
  html << "</table>";
  const std::pair<const char*, std::string> files[] = {{"quality.md", md.str()}, {"quality.csv", csv.str()}, {"report.html", html.str()},
                                                       {"quality.json", j.dump(2) + "\n"}, {"quality.svg", chart + "\n"}};
  for (const auto& [name, text] : files) write_file_atomically(out / name, [&](std::ostream& o) { o << text; });
}

}  // namespace

void add_bench_quality_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-quality",
                                 "Table 4 of the Multi-MoE paper on a forged family: a target's held-out perplexity alone, averaged, "
                                 "consolidated and without reconfiguration, as more variants are served together; beside them delta folders "
                                 "(DeltaMoE) and consolidation at the same device bytes");
  struct Opts {
    fs::path family, out;
    std::string target, domain;
    std::vector<std::string> others;
    double resident_fraction = 0.5;
    std::int64_t window = 128, max_windows = 64;
    int threads = 0;
    bool deltas = true, virtual_experts = true;
    double calibration_fraction = 0.25;
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
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_flag("--virtual,!--no-virtual", o->virtual_experts,
                "also serve virtual experts (SwapMoE) at the consolidated and delta rows' bytes, counts planned on the first "
                "--calibration-fraction of the held-out text and uniform; every row is then scored on the rest")
      ->default_val(true);
  cmd->add_option("--calibration-fraction", o->calibration_fraction, "with --virtual: the held-out text's share that calibrates the planner")
      ->default_val(0.25);
  cmd->add_flag("--deltas,!--no-deltas", o->deltas, "also serve every variant as a delta folder over the family's base/, in 3 formats, "
                "and consolidation at each one's device bytes")->default_val(true);
  cmd->callback([o] {
    if (!(o->resident_fraction > 0 && o->resident_fraction <= 1))
      throw InvalidArgument("--resident-fraction", std::to_string(o->resident_fraction), "must be in (0, 1]");
    configure_threads(o->threads);
    check_output(o->out, "--out", {o->family}, OutputKind::Folder);  // before the minutes of scoring, not after
    const auto t0 = std::chrono::steady_clock::now();
    const std::string domain = o->domain.empty() ? o->target : o->domain;
    if (!(o->calibration_fraction > 0 && o->calibration_fraction < 1))
      throw InvalidArgument("--calibration-fraction", std::to_string(o->calibration_fraction), "must be in (0, 1)");
    std::vector<std::int64_t> ids = heldout_ids(o->family / o->target, domain), calibration;
    if (o->virtual_experts) {
      // The planner calibrates on the text's head; every row is scored on the rest, which it never saw.
      const auto cut = static_cast<std::ptrdiff_t>(static_cast<double>(ids.size()) * o->calibration_fraction);
      calibration.assign(ids.begin(), ids.begin() + cut);
      ids.erase(ids.begin(), ids.begin() + cut);
      std::cout << "  virtual experts calibrate on the first " << calibration.size() << " held-out tokens; every row is scored on the other "
                << ids.size() << "\n";
    }
    std::vector<Row> rows;
    auto report = [&](const Row& r) {
      std::cout << "  " << r.served << "  " << r.method << " (" << r.variants << ")  " << fixed(mib(r.bytes), 2) << " MiB  perplexity "
                << fixed(r.p.perplexity, 3) << std::endl;
      rows.push_back(r);
    };
    auto alone_row = [&](const std::string& name) {
      Row r{"alone", name, 1, -1, -1};
      r.p = checkpoint_perplexity(o->family / name, ids, o->window, o->max_windows, &r.bytes);
      report(r);
      return r.bytes;
    };
    std::vector<std::string> names{o->target};
    names.insert(names.end(), o->others.begin(), o->others.end());
    std::vector<std::uint64_t> alone_bytes;
    for (const std::string& name : names) alone_bytes.push_back(alone_row(name));
    for (const std::string& extra : std::vector<std::string>{"base", "esft-" + o->target})
      if (fs::exists(o->family / extra / "config.json")) alone_row(extra);
    const double alone = rows.front().p.perplexity;

    // Every served variant as a delta folder over the family's base, in each format.
    const fs::path scratch = fs::temp_directory_path() / ("mosaic-quality-" + std::to_string(::getpid()));
    struct ScratchGuard {
      fs::path dir;
      ~ScratchGuard() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } guard{scratch};
    const bool deltas = o->deltas && fs::exists(o->family / "base" / "config.json");
    if (o->deltas && !deltas) std::cout << "  (no base/ in " << o->family.string() << ": no delta rows)\n";
    if (deltas) {
      const Checkpoint base(o->family / "base");
      for (const DeltaMethod& m : kDeltaMethods)
        for (const std::string& name : names) write_delta(base, Checkpoint(o->family / name), m.format, scratch / m.name / name);
    }
    // DeltaMoE's own setting: the target alone, each layer's experts as its medoid plus deltas of the
    // others (analysis/delta_within.h), served by the delta strategy.
    for (const DeltaMethod& m : kDeltaMethods) {
      if (!o->deltas) break;
      const WithinReport w = write_delta_within(Checkpoint(o->family / o->target), m.format, scratch / "within" / m.name);
      const auto session = open_delta_serving({w.delta_dir}, w.delta_dir.filename().string(), scratch);
      Row r{std::string("within ") + m.name, o->target, 1, -1, -1};
      r.p = served_perplexity(*session, ids, o->window, o->max_windows);
      r.bytes = session->runtime->weight_bytes();
      report(r);
    }

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

      const fs::path averaged = scratch / ("averaged-" + std::to_string(n));
      write_averaged(family, averaged);
      Row avg{"averaging", served, static_cast<std::int64_t>(n), -1, -1};
      avg.p = checkpoint_perplexity(averaged, ids, o->window, o->max_windows, &avg.bytes);
      report(avg);

      ServingArgs args;
      args.variants = dirs;
      args.target = o->target;
      args.resident_sets = "1";  // the weight bytes compared are one variant's set and the experts
      // At half the served experts, capped at one shared copy per position; the rest load on miss.
      for (bool reconfig : {true, false}) {
        args.capacity = std::max<std::int64_t>(1, std::llround(o->resident_fraction * static_cast<double>(total)));
        args.no_reconfig = !reconfig;
        const auto session = open_serving(args);
        Row r{reconfig ? "consolidated" : "no-reconfig", served, static_cast<std::int64_t>(n), session->layout.plan.capacity, total};
        r.p = served_perplexity(*session, ids, o->window, o->max_windows);
        r.bytes = session->runtime->weight_bytes();
        report(r);
      }

      // Each delta format; then consolidation with every expert resident in no more bytes: as few
      // positions shared as fit.
      for (const DeltaMethod& m : kDeltaMethods) {
        if (!deltas) break;
        std::vector<fs::path> folders;
        for (const fs::path& d : dirs) folders.push_back(scratch / m.name / d.filename());
        const auto session = open_delta_serving(folders, o->target, scratch);
        Row r{m.name, served, static_cast<std::int64_t>(n), -1, -1};
        r.p = served_perplexity(*session, ids, o->window, o->max_windows);
        r.bytes = session->runtime->weight_bytes();
        report(r);
        std::uint64_t non_expert = 0;
        for (const DeviceItem& item : session->runtime->device_items())
          if (item.name.starts_with("non-expert weights")) non_expert += item.bytes;
        // c shared positions and (P − c) · n own copies: c · eb + (P − c) · n · eb ≤ the delta's expert bytes.
        const auto eb = static_cast<double>(session->store->expert_bytes()), positions = static_cast<double>(total / static_cast<std::int64_t>(n));
        const double room = static_cast<double>(r.bytes - non_expert) / eb;
        const auto shared = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil((positions * static_cast<double>(n) - room) / static_cast<double>(n - 1) - 1e-9)), 0,
                                                     static_cast<std::int64_t>(positions));
        const auto resident = open_consolidated_resident(dirs, o->target, shared);
        Row c{"consolidated (all resident)", served, static_cast<std::int64_t>(n), static_cast<std::int64_t>(resident->runtime->config().pinned.size()), total};
        c.p = served_perplexity(*resident, ids, o->window, o->max_windows);
        c.bytes = resident->runtime->weight_bytes();
        report(c);
      }
      // Hybrid over the 4-bit 2:4 deltas: a quarter, half, three quarters of the positions share the base.
      const std::int64_t positions = total / static_cast<std::int64_t>(n);
      for (std::int64_t quarter = 1; quarter <= 3 && deltas; ++quarter) {
        std::vector<fs::path> folders;
        for (const fs::path& d : dirs) folders.push_back(scratch / kDeltaMethods[1].name / d.filename());
        const std::int64_t shared = positions * quarter / 4;
        const auto session = open_delta_serving(folders, o->target, scratch, shared);
        Row r{"hybrid 4-bit 2:4 (" + std::to_string(shared) + " of " + std::to_string(positions) + " positions shared)", served,
              static_cast<std::int64_t>(n), -1, -1};
        r.p = served_perplexity(*session, ids, o->window, o->max_windows);
        r.bytes = session->runtime->weight_bytes();
        report(r);
      }
      // Virtual experts at the bytes of the consolidated row and of each delta row: counts planned on
      // the calibration text, and uniform (each layer's most important experts either way).
      std::vector<std::uint64_t> points;
      for (const Row& r : rows)
        if (r.served == static_cast<std::int64_t>(n) && (r.method == "consolidated" || r.method.starts_with("delta "))) points.push_back(r.bytes);
      if (o->virtual_experts) {
        const HostStore store(family);
        const VirtualCurves curves = measure_virtual(family, store, calibration, o->window, o->max_windows);
        for (std::uint64_t weights : points)
          for (bool uniform : {false, true}) {
            try {
              const auto session = open_virtual_serving(dirs, o->target, curves, weights, uniform);
              const std::string method = uniform ? "virtual experts (uniform)" : "virtual experts (planned)";
              const std::uint64_t bytes = session->runtime->weight_bytes();
              // Uniform counts step by whole experts per layer: two points may buy the same layout.
              if (std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.served == static_cast<std::int64_t>(n) && r.method == method && r.bytes == bytes; }))
                continue;
              Row r{method, served, static_cast<std::int64_t>(n), session->layout.plan.capacity, total};
              r.p = served_perplexity(*session, ids, o->window, o->max_windows);
              r.bytes = bytes;
              report(r);
            } catch (const BudgetError& e) {
              std::cout << "  " << n << "  virtual experts: none at " << fixed(mib(weights), 2) << " MiB (" << e.what() << ")\n";
            }
          }
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "bench-quality: " << rows.size() << " measurements in " << fixed(seconds, 1) << " s; alone " << fixed(alone, 3) << "\n";
    if (!o->out.empty()) {
      const nlohmann::json meta = {{"target", o->target}, {"domain", domain}, {"resident_fraction", o->resident_fraction},
                                   {"calibration_tokens", calibration.size()}, {"scored_tokens", ids.size()},
                                   {"window", o->window}, {"max_windows", o->max_windows}, {"machine", machine_description()},
                                   {"date", utc_timestamp()}, {"rows", nlohmann::json::array()}};
      std::uint64_t all_alone = 0;
      for (std::uint64_t b : alone_bytes) all_alone += b;
      StagedFolder staged(o->out);  // the five files appear together or not at all
      write_outputs(staged.path(), rows, o->target, domain, alone, quality_chart(rows, static_cast<std::int64_t>(names.size()), alone, all_alone), meta);
      staged.publish("--out", {o->family});
      std::cout << "wrote " << (o->out / "quality.md").string() << ", quality.csv, quality.json, quality.svg, report.html\n";
    }
  });
}

}  // namespace mosaic::cli
