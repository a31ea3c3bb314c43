#include "store/report_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>

#include "common/atomic_file.h"
#include "common/error.h"
#include "store/run_json.h"

namespace mosaic {
namespace {

std::string num(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

// How a simulated run's tokens chose experts, from its recorded "routing" (serving/sim_sweep.cpp):
// "uniform", or the routing model's file, where it came from and how many experts a prompt touches.
std::string routing_of(const nlohmann::json& r) {
  if (r.is_string()) return r.get<std::string>();
  if (!r.is_object() || !r.contains("file") || !r["file"].is_string()) return "";
  std::string out = r["file"].get<std::string>();
  if (r.contains("distinct") && r["distinct"].is_number()) {
    std::ostringstream o;
    o.precision(3);
    o << r["distinct"].get<double>();
    out += " (" + o.str() + " distinct experts per MoE layer in a prompt)";
  }
  if (r.contains("source") && r["source"].is_string() && !r["source"].get<std::string>().empty()) out += ": " + r["source"].get<std::string>();
  return out;
}

// The mean of `v`, and its sample standard deviation (n − 1; NaN below two values).
std::pair<double, double> mean_and_sd(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = v.empty() ? std::nan("") : sum / static_cast<double>(v.size());
  if (v.size() < 2) return {mean, std::nan("")};
  double squares = 0;
  for (double x : v) squares += (x - mean) * (x - mean);
  return {mean, std::sqrt(squares / static_cast<double>(v.size() - 1))};
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void write_csv(const std::filesystem::path& path, const std::vector<std::string>& header,
               const std::vector<std::vector<std::string>>& rows) {
  write_file_atomically(path, [&](std::ostream& out) {
    for (std::size_t i = 0; i < header.size(); ++i) out << (i ? "," : "") << header[i];
    out << "\n";
    for (const auto& row : rows) {
      for (std::size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << csv_field(row[i]);
      out << "\n";
    }
  });
}

}  // namespace

ReportData load_report_data(const Recorder& recorder, const std::vector<std::int64_t>& run_ids,
                            const std::string& database_name, bool incomplete) {
  ReportData d;
  d.database = database_name;
  const auto all = recorder.runs();
  for (std::int64_t id : run_ids)
    if (std::none_of(all.begin(), all.end(), [&](const RunInfo& r) { return r.id == id; }))
      throw InvalidArgument(database_name, "run " + std::to_string(id), "is not in this database",
                            "list the runs with `mosaic-cli runs --db FILE`");
  // Finished runs, and those of records older than run statuses ('unknown').
  auto complete = [](const RunInfo& r) { return r.status == "finished" || r.status == "unknown"; };
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> layer_counts;  // hits, totals
  for (const RunInfo& info : all) {
    if (!run_ids.empty() && std::find(run_ids.begin(), run_ids.end(), info.id) == run_ids.end()) continue;
    if (run_ids.empty() && !incomplete && !complete(info)) {
      d.left_out.push_back(info);
      continue;
    }
    ReportRun run;
    run.info = info;
    const auto config = nlohmann::json::parse(info.config_json, nullptr, /*allow_exceptions=*/false);
    run.external = info.strategy == "serve";
    if (config.is_object()) {
      if (config.contains("kind") && config["kind"] == "serve") run.external = true;
      if (config.contains("rate") && config["rate"].is_number()) run.rate = config["rate"].get<double>();
      if (config.contains("repeat") && config["repeat"].is_number_integer()) run.repeat = config["repeat"].get<int>();
      if (config.contains("capacity") && config["capacity"].is_number_integer()) run.capacity = config["capacity"].get<std::int64_t>();
      if (config.contains("max_sequences") && config["max_sequences"].is_number_integer())
        run.max_sequences = config["max_sequences"].get<std::int64_t>();
      if (config.contains("clock") && config["clock"].is_string()) run.clock = config["clock"].get<std::string>();
      if (config.contains("device_profile") && config["device_profile"].is_string())
        run.device_profile = config["device_profile"].get<std::string>();
      if (config.contains("routing")) run.routing = routing_of(config["routing"]);
      // Sweeps ran on the CPU backend alone before they recorded a device.
      if (config.contains("device") && config["device"].is_string()) run.device = config["device"].get<std::string>();
      else if (run.clock == "virtual" || run.clock == "real") run.device = "cpu";
      if (config.contains("variants") && config["variants"].is_array())  // serve runs: the models served
        for (const auto& v : config["variants"])
          if (v.is_string()) run.variants.push_back(v.get<std::string>());
      if (config.contains("sweep") && config["sweep"].is_object()) {
        const auto& sweep = config["sweep"];
        if (sweep.contains("duration_seconds") && sweep["duration_seconds"].is_number())
          run.duration_seconds = sweep["duration_seconds"].get<double>();
        if (sweep.contains("variants") && sweep["variants"].is_array())
          for (const auto& v : sweep["variants"])
            if (v.is_string()) run.variants.push_back(v.get<std::string>());
      }
    }
    run.requests = recorder.requests(info.id);
    run.summary = summarize(run.requests);
    if (std::find(d.strategies.begin(), d.strategies.end(), info.strategy) == d.strategies.end()) d.strategies.push_back(info.strategy);
    auto& [hits, totals] = layer_counts[info.strategy];
    auto& alone = d.alone_layer_times[info.strategy];
    for (const RequestRecord& r : run.requests) {
      const RuntimeCounters& c = r.stats.counters;
      hits.resize(std::max(hits.size(), c.layers.size()));
      totals.resize(hits.size());
      for (std::size_t l = 0; l < c.layers.size(); ++l) {
        hits[l] += c.layers[l].hits;
        totals[l] += c.layers[l].hits + c.layers[l].misses;
        add_times(alone, c.layers[l].alone);
      }
    }
    d.runs.push_back(std::move(run));
  }
  for (const std::string& s : d.strategies) {
    std::vector<double> rates;
    for (const ReportRun& r : d.runs)
      if (r.info.strategy == s && std::find(rates.begin(), rates.end(), r.rate) == rates.end()) rates.push_back(r.rate);
    std::sort(rates.begin(), rates.end());
    for (double rate : rates) {
      ReportPoint p;
      p.strategy = s;
      p.rate = rate;
      p.external = std::any_of(d.runs.begin(), d.runs.end(), [&](const ReportRun& r) { return r.info.strategy == s && r.rate == rate && r.external; });
      std::vector<double> throughput, tokens, ttft, turnaround;  // each run's, for the spread
      for (const ReportRun& r : d.runs) {
        if (r.info.strategy != s || r.rate != rate) continue;
        ++p.runs;
        const RunSummary& m = r.summary;
        throughput.push_back(m.requests_per_minute);
        tokens.push_back(m.tokens_per_second);
        ttft.push_back(m.ttft.mean);
        turnaround.push_back(m.turnaround.mean);
        p.ttft_p90 += m.ttft.p90;
        p.turnaround_p90 += m.turnaround.p90;
        p.hit_rate += std::isnan(m.hit_rate) ? 0 : m.hit_rate;
        p.swap_seconds += m.swap_seconds;
      }
      for (double* v : {&p.ttft_p90, &p.turnaround_p90, &p.hit_rate, &p.swap_seconds}) *v /= p.runs;
      std::tie(p.requests_per_minute, p.requests_per_minute_sd) = mean_and_sd(throughput);
      std::tie(p.tokens_per_second, p.tokens_per_second_sd) = mean_and_sd(tokens);
      std::tie(p.ttft_mean, p.ttft_mean_sd) = mean_and_sd(ttft);
      std::tie(p.turnaround_mean, p.turnaround_mean_sd) = mean_and_sd(turnaround);
      d.points.push_back(p);
    }
    const auto& [hits, totals] = layer_counts[s];
    auto& per_layer = d.layer_hit_rates[s];
    for (std::size_t l = 0; l < hits.size(); ++l)
      per_layer.push_back(totals[l] ? static_cast<double>(hits[l]) / static_cast<double>(totals[l]) : std::nan(""));
  }
  return d;
}

std::string format_rate(double per_second) {
  char text[32];
  std::snprintf(text, sizeof text, per_second == 0 || std::abs(per_second) >= 0.1 ? "%.2f" : "%.2g", per_second);
  return text;
}

void check_one_setup(const ReportData& data, const std::string& database) {
  // A setup: the clock and the variants' folder names (a run's paths as the sweep wrote them may
  // differ in form). Serve runs take clients' requests on the real clock: only their family counts.
  struct Setup {
    std::string clock;
    std::vector<std::string> variants;
    std::vector<std::int64_t> runs;
  };
  std::vector<Setup> setups;
  for (const ReportRun& r : data.runs) {
    std::vector<std::string> names;
    for (const std::string& v : r.variants) {
      const std::filesystem::path folder = std::filesystem::path(v).lexically_normal();
      names.push_back((folder.has_filename() ? folder : folder.parent_path()).filename().string());  // "base/" is base
    }
    std::sort(names.begin(), names.end());
    // The device is part of the setup too (the CPU and a GPU are not averaged), as is a simulated device's profile.
    const std::string where = r.device_profile.empty() ? r.device : r.device_profile;
    const std::string clock = r.external || r.clock.empty() ? std::string() : r.clock + " clock" + (where.empty() ? "" : " on " + where);
    auto same = [&](const Setup& s) {
      return (names.empty() || s.variants.empty() || s.variants == names) && (clock.empty() || s.clock.empty() || s.clock == clock);
    };
    auto it = std::find_if(setups.begin(), setups.end(), same);
    if (it == setups.end()) it = setups.insert(setups.end(), Setup{clock, names, {}});
    if (it->clock.empty()) it->clock = clock;
    if (it->variants.empty()) it->variants = names;
    it->runs.push_back(r.info.id);
  }
  if (setups.size() < 2) return;
  std::string which;
  for (const Setup& s : setups) {
    std::string ids;
    for (std::size_t i = 0; i < s.runs.size() && i < 6; ++i) {
      if (i) ids += ' ';
      ids += std::to_string(s.runs[i]);
    }
    if (s.runs.size() > 6) ids += " … (" + std::to_string(s.runs.size()) + " runs)";
    std::string family;
    for (std::size_t i = 0; i < s.variants.size() && i < 4; ++i) {
      if (i) family += ", ";
      family += s.variants[i];
    }
    if (s.variants.size() > 4) family += ", …";
    which += "; runs " + ids + ": " + std::to_string(s.variants.size()) + " variants (" + family + ")" + (s.clock.empty() ? "" : ", " + s.clock);
  }
  throw InvalidArgument(database, "", "holds runs of " + std::to_string(setups.size()) + " setups, which one report would average together" + which,
                        "report each setup on its own: name its run ids (`mosaic-cli runs --db FILE` lists them)");
}

std::string ReportRun::status() const {
  // One request cannot complete within a window that ends at its own arrival: that says nothing of load.
  if (info.status == "finished" && !external && summary.requests > 1 && summary.completed_in_window == 0) return "saturated";
  return info.status;
}

void write_report_tables(const ReportData& d, const std::filesystem::path& dir) {
  std::vector<std::vector<std::string>> runs, points, layers, latency, requests;
  nlohmann::ordered_json j;
  j["database"] = d.database;
  j["runs"] = nlohmann::ordered_json::array();
  for (const ReportRun& r : d.runs) {
    const RunSummary& s = r.summary;
    runs.push_back({std::to_string(r.info.id), r.info.strategy, r.status(), r.external ? std::string() : num(r.rate), std::to_string(r.repeat), std::to_string(s.requests),
                    std::to_string(s.failed), num(s.makespan_seconds), num(s.window_seconds), num(s.drain_seconds),
                    num(s.requests_per_minute), num(s.tokens_per_second),
                    num(s.ttft.p50), num(s.ttft.p90), num(s.ttft.p99), num(s.ttft.mean), num(s.turnaround.p50),
                    num(s.turnaround.p90), num(s.turnaround.p99), num(s.turnaround.mean), num(s.queue_wait.mean),
                    num(s.tpot.mean), num(s.hit_rate), std::to_string(s.swaps), num(s.swap_seconds),
                    std::to_string(s.swap_bytes), std::to_string(s.load_bytes), std::to_string(s.loads), std::to_string(s.disk_loads),
                    num(s.disk_seconds), r.info.machine, r.info.started_at});
    nlohmann::ordered_json run = {{"id", r.info.id}, {"strategy", r.info.strategy}, {"status", r.status()},
                                  {"rate_per_second", r.external ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.rate)}, {"repeat", r.repeat}};
    run.update(summary_json(s));
    run.update(nlohmann::ordered_json{{"machine", r.info.machine}, {"build", r.info.build}, {"started_at", r.info.started_at}});
    j["runs"].push_back(run);
    for (const RequestRecord& q : r.requests) {
      const RequestStats& st = q.stats;
      const LayerCounts t = st.counters.total();
      requests.push_back({std::to_string(r.info.id), std::to_string(q.index), q.target, std::to_string(q.lane), num(st.arrival),
                          num(st.start), num(st.first_token), num(st.finish), num(st.queue_wait()), num(st.ttft()),
                          num(st.tpot()), num(st.turnaround()), std::to_string(st.generated_tokens), std::to_string(t.hits),
                          std::to_string(t.misses), std::to_string(t.loads - t.disk_loads), std::to_string(t.disk_loads),
                          num(st.swap_seconds()), std::to_string(st.bytes_moved()), finish_name(q.outcome)});
    }
  }
  j["points"] = nlohmann::ordered_json::array();
  for (const ReportPoint& p : d.points) {
    points.push_back({p.strategy, p.external ? std::string() : num(p.rate), std::to_string(p.runs), num(p.requests_per_minute),
                      num(p.requests_per_minute_sd), num(p.tokens_per_second), num(p.tokens_per_second_sd), num(p.ttft_mean),
                      num(p.ttft_mean_sd), num(p.ttft_p90), num(p.turnaround_mean), num(p.turnaround_mean_sd), num(p.turnaround_p90),
                      num(p.hit_rate), num(p.swap_seconds)});
    // Keys as a run's: the unit in each, rates as fractions, _sd the spread over the repeats.
    j["points"].push_back({{"strategy", p.strategy}, {"rate_per_second", p.external ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(p.rate)},
                           {"runs", p.runs}, {"requests_per_minute", json_number(p.requests_per_minute)},
                           {"requests_per_minute_sd", json_number(p.requests_per_minute_sd)}, {"tokens_per_second", json_number(p.tokens_per_second)},
                           {"tokens_per_second_sd", json_number(p.tokens_per_second_sd)}, {"ttft_mean_seconds", json_number(p.ttft_mean)},
                           {"ttft_mean_seconds_sd", json_number(p.ttft_mean_sd)}, {"ttft_p90_seconds", json_number(p.ttft_p90)},
                           {"turnaround_mean_seconds", json_number(p.turnaround_mean)}, {"turnaround_mean_seconds_sd", json_number(p.turnaround_mean_sd)},
                           {"turnaround_p90_seconds", json_number(p.turnaround_p90)}, {"hit_rate", json_number(p.hit_rate)},
                           {"swap_seconds", json_number(p.swap_seconds)}});
  }
  j["layer_hit_rates"] = nlohmann::ordered_json::object();
  for (const auto& s : d.strategies) {
    const auto& rates = d.layer_hit_rates.at(s);
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (std::size_t l = 0; l < rates.size(); ++l) {
      layers.push_back({s, std::to_string(l), num(rates[l])});
      arr.push_back(std::isnan(rates[l]) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(rates[l]));
    }
    j["layer_hit_rates"][s] = arr;
  }
  j["layer_latency_by_hits"] = nlohmann::ordered_json::object();
  for (const auto& s : d.strategies) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    const auto& times = d.alone_layer_times.at(s);
    for (std::size_t h = 0; h < times.size(); ++h) {
      if (times[h].steps == 0) continue;
      const auto n = static_cast<double>(times[h].steps);
      const double attention = times[h].attention_seconds / n, experts = times[h].expert_seconds / n;
      latency.push_back({s, std::to_string(h), std::to_string(times[h].steps), num(attention), num(experts)});
      arr.push_back({{"hits", h}, {"layer_steps", times[h].steps}, {"attention_seconds", attention}, {"expert_seconds", experts}});
    }
    j["layer_latency_by_hits"][s] = arr;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string(), "", "cannot create the report folder: " + ec.message());
  // Every column that has a unit says it: _s seconds, _per_s and _per_min rates, _bytes; hit rates
  // are fractions (0 to 1); _sd the sample standard deviation over a point's repeats, in the unit
  // of the column before it.
  write_csv(dir / "runs.csv",
            {"run", "strategy", "status", "rate_per_s", "repeat", "requests", "failed", "makespan_s", "window_s", "drain_s",
             "requests_per_min", "tokens_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s", "turnaround_p50_s",
             "turnaround_p90_s", "turnaround_p99_s", "turnaround_mean_s", "queue_wait_mean_s", "tpot_mean_s", "hit_rate", "swaps",
             "swap_s", "swap_bytes", "load_bytes", "loads", "disk_loads", "disk_s", "machine", "started_at"},
            runs);
  write_csv(dir / "points.csv",
            {"strategy", "rate_per_s", "runs", "requests_per_min", "requests_per_min_sd", "tokens_per_s", "tokens_per_s_sd",
             "ttft_mean_s", "ttft_mean_s_sd", "ttft_p90_s", "turnaround_mean_s", "turnaround_mean_s_sd", "turnaround_p90_s",
             "hit_rate", "swap_s"},
            points);
  write_csv(dir / "layer_hit_rates.csv", {"strategy", "layer", "hit_rate"}, layers);
  write_csv(dir / "layer_latency.csv", {"strategy", "hits", "layer_steps", "attention_s", "experts_s"}, latency);
  write_csv(dir / "requests.csv",
            {"run", "index", "target", "lane", "arrival_s", "start_s", "first_token_s", "finish_s", "queue_wait_s", "ttft_s",
             "tpot_s", "turnaround_s", "output_tokens", "hits", "misses", "ram_loads", "disk_loads", "swap_s", "bytes_moved",
             "outcome"},
            requests);
  const std::string text = j.dump(1);
  write_file_atomically(dir / "report.json", [&](std::ostream& out) { out << text << "\n"; });
}

}  // namespace mosaic
