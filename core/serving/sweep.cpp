#include "serving/sweep.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/byte_size.h"
#include "common/error.h"
#include "common/json_fields.h"
#include "common/json_int.h"
#include "common/json_text.h"
#include "common/text_file.h"
#include "analysis/consolidation.h"
#include "runtime/device.h"
#include "runtime/miss_policy.h"

namespace mosaic {

namespace {

// The paths a sweep names, checked as it is loaded: a missing one is said naming its field, before a
// record is opened or anything read, not later as a bare path.
void check_named_paths(const SweepConfig& c, const std::string& file) {
  const auto check = [&](const std::filesystem::path& p, const std::string& field, bool folder) {
    std::error_code ec;
    const auto st = std::filesystem::status(p, ec);
    std::string problem;
    if (!std::filesystem::exists(st)) problem = "names " + p.string() + ", which does not exist";
    else if (folder != std::filesystem::is_directory(st)) problem = "names " + p.string() + (folder ? ", a file, not a folder" : ", a folder, not a file");
    if (!problem.empty())
      throw MissingError(file, "field '" + field + "'", problem, "fix the path (a relative one is read from the config's folder)");
  };
  for (std::size_t i = 0; i < c.variants.size(); ++i) check(c.variants[i], "variants[" + std::to_string(i) + "]", true);
  if (!c.device_profile.empty()) check(c.device_profile, "device_profile", false);
  if (!c.routing.empty()) check(c.routing, "routing", false);
  if (!c.trace.empty()) check(c.trace, "trace", false);
  for (std::size_t i = 0; i < c.strategies.size(); ++i)
    if (!c.strategies[i].calibration.empty()) check(c.strategies[i].calibration, "strategies[" + std::to_string(i) + "].calibration", false);
}

}  // namespace

SweepConfig load_sweep_config(const std::filesystem::path& path) {
  SweepConfig c = parse_sweep_config(read_text_file(path, "check the path of the sweep config"), path.string(), path.parent_path());
  check_named_paths(c, path.string());
  return c;
}

namespace {

// Strategies that would be recorded under one label (two consolidated ones of different capacities)
// would be merged in every chart and report: each unnamed one gets the settings it was given that
// differ within its group, "consolidated (capacity 64)". Names that still meet, given ones included,
// are refused.
template <class Fail>
void name_strategies_apart(const nlohmann::json& written, std::vector<StrategyConfig>& strategies, Fail fail) {
  auto value_text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  std::map<std::string, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < strategies.size(); ++i)
    if (strategies[i].name.empty()) groups[strategy_label(strategies[i])].push_back(i);
  for (const auto& [label, members] : groups) {
    if (members.size() < 2) continue;
    std::set<std::string> differing;  // keys whose values are not the same in every member
    for (std::size_t i : members)
      for (const auto& [key, value] : written[i].items())
        for (std::size_t other : members)
          if (key != "name" && (!written[other].contains(key) || written[other][key] != value)) differing.insert(key);
    for (std::size_t i : members) {
      std::string settings;
      for (const std::string& key : differing)
        if (written[i].contains(key)) settings += (settings.empty() ? "" : ", ") + key + " " + value_text(written[i][key]);
      if (!settings.empty()) strategies[i].name = label + " (" + settings + ")";
    }
  }
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    const std::string name = strategy_label(strategies[i]);
    if (const auto [at, fresh] = seen.emplace(name, i); !fresh)
      fail("strategies[" + std::to_string(i) + "]",
           "would be recorded as '" + name + "', as strategies[" + std::to_string(at->second) +
               "] is: give one a different \"name\", or use \"repeats\" to run the same strategy again");
  }
}

constexpr std::int64_t kMaxRepeats = 1000, kMaxTokens = std::int64_t{1} << 20, kMaxRequests = 1000000;
constexpr double kMaxDuration = 1e6;

SweepConfig parse_fields(const std::string& text, const std::string& file, const std::filesystem::path& base_dir) {
  SweepConfig c;
  c.text = text;
  const std::string hint = "see sample_configs/paper-qos.json";
  const auto j = parse_json(c.text, file, hint);
  auto fail = [&](const std::string& field, const std::string& problem) -> void {
    throw FormatError(file, "field '" + field + "'", problem, "see sample_configs/paper-qos.json");
  };
  // Typed reads of an object's fields, named `prefix` + key, failing as fail() does.
  auto fields = [&](const nlohmann::json& o, std::string prefix = {}) {
    return JsonFields(o, [&](const std::string& field, const std::string& problem, bool) { fail(field, problem); }, std::move(prefix));
  };
  const JsonFields top = fields(j);
  if (!j.is_object()) throw FormatError(file, "", "is not a JSON object", hint);
  check_keys(j, {"schema", "description", "variants", "targets", "clock", "rates", "repeats", "seed", "alpha", "duration_seconds",
                 "prompt", "output", "strategies", "trace", "trace_routes", "device", "device_profile", "routing", "host_memory",
                 "host_budget", "cpu_weights"},
             file, "", hint);
  check_schema(j, "mosaic.sweep/1", file);

  if (!j.contains("variants") || !j["variants"].is_array() || j["variants"].size() < 2)
    fail("variants", "must list at least two checkpoint folders");
  for (const auto& v : j["variants"]) {
    if (!v.is_string()) fail("variants", "must hold folder paths");
    const std::filesystem::path p = v.get<std::string>();
    c.variants.push_back(p.is_absolute() ? p : base_dir / p);
  }
  const std::string clock = j.value("clock", "virtual");
  if (clock != "virtual" && clock != "real" && clock != "simulated") fail("clock", "is '" + clock + "'; use virtual, real or simulated");
  c.clock = clock == "real" ? RunClock::Real : clock == "simulated" ? RunClock::Simulated : RunClock::Virtual;
  if (c.clock == RunClock::Simulated) {
    if (!j.contains("device_profile") || !j["device_profile"].is_string() || j["device_profile"].get<std::string>().empty())
      fail("device_profile", "must name a device profile (mosaic.device/1) for the simulated clock, e.g. ../sample_configs/devices/a100-pcie4-paper.json");
    const std::filesystem::path d = j["device_profile"].get<std::string>();
    c.device_profile = d.is_absolute() ? d : base_dir / d;
    if (j.contains("routing")) {
      if (!j["routing"].is_string() || j["routing"].get<std::string>().empty())
        fail("routing", "must name a routing model (mosaic.routing/1), e.g. routing/sample-family-heldout.json");
      const std::filesystem::path r = j["routing"].get<std::string>();
      c.routing = r.is_absolute() ? r : base_dir / r;
    }
  } else {
    for (const char* key : {"device_profile", "routing", "host_memory"})
      if (j.contains(key)) fail(key, "is for the simulated clock only (\"clock\": \"simulated\")");
  }
  if (j.contains("device")) {
    if (c.clock == RunClock::Simulated)
      fail("device", "is the engine's backend, and on the simulated clock that is a simulated device: its device is device_profile");
    const auto d = j["device"].is_string() ? parse_device(j["device"].get<std::string>()) : std::nullopt;
    if (!d) fail("device", "must be cpu (the fp32 reference) or cuda (bf16 weights on the GPU)");
    c.device = *d;
  }
  if (j.contains("cpu_weights")) {
    if (c.clock == RunClock::Simulated) fail("cpu_weights", "is how the CPU backend holds weights, and the simulated clock reads no weights");
    const auto w = j["cpu_weights"].is_string() ? parse_cpu_weights(j["cpu_weights"].get<std::string>()) : std::nullopt;
    if (!w) fail("cpu_weights", "must be stored (bf16 weights held as bf16), fp32 (widened copies) or mapped (read in place)");
    c.cpu_weights = *w;
  }
  if (j.contains("host_budget")) {
    if (c.clock == RunClock::Simulated)
      fail("host_budget", "is the engine's host tier, and the simulated clock reads no weights");
    const auto& h = j["host_budget"];
    if (!(h.is_string() && h.get<std::string>() == "all")) {
      const auto b = h.is_string() ? parse_byte_size(h.get<std::string>()) : std::nullopt;
      if (!b) fail("host_budget", h.is_string() ? byte_size_problem(h.get<std::string>()) + "; write a byte size such as \"16GiB\", or \"all\""
                                                : "must be a byte size such as \"16GiB\", or \"all\"");
      c.host_budget = b;
    }
  }
  if (j.contains("host_memory")) {
    const auto& h = j["host_memory"];
    if (!h.is_object()) fail("host_memory", "must be an object: {\"experts\": \"pinned\" | \"pageable\", \"non_expert\": …}");
    check_keys(h, {"experts", "non_expert"}, file, "host_memory", hint);
    auto kind = [&](const char* key) {
      if (!h.contains(key)) return true;
      if (!h[key].is_string() || (h[key] != "pinned" && h[key] != "pageable")) fail(std::string("host_memory.") + key, "must be pinned or pageable");
      return h[key] == "pinned";
    };
    c.host_memory = {.experts_pinned = kind("experts"), .non_expert_pinned = kind("non_expert")};
  }
  if (j.contains("trace")) {
    if (!j["trace"].is_string() || j["trace"].get<std::string>().empty()) fail("trace", "must be the path of a JSONL trace");
    const std::filesystem::path t = j["trace"].get<std::string>();
    c.trace = t.is_absolute() ? t : base_dir / t;
  }
  if (j.contains("trace_routes")) {
    if (!j["trace_routes"].is_boolean()) fail("trace_routes", "must be true or false");
    c.trace_routes = j["trace_routes"].get<bool>();
    if (c.trace_routes && c.clock == RunClock::Simulated) fail("trace_routes", "records where a model's router sent each token; on the simulated clock the routes are drawn, not a router's");
  }
  if (j.contains("targets")) {
    if (!j["targets"].is_array() || j["targets"].empty()) fail("targets", "must list variant names");
    for (const auto& t : j["targets"]) {
      if (!t.is_string()) fail("targets", "must hold variant names");
      c.targets.push_back(t.get<std::string>());
    }
  }
  if (j.contains("rates") && j["rates"].is_object()) {
    // {"saturation": {…}}: chosen from each strategy's measured saturation rate.
    const auto& r = j["rates"];
    const std::string shape = "must be a list of requests/s or {\"saturation\": {\"points\", \"from\", \"to\", \"probe_requests\"}}";
    if (r.size() != 1 || !r.contains("saturation") || !r["saturation"].is_object()) fail("rates", shape);
    const auto& s = r["saturation"];
    check_keys(s, {"points", "from", "to", "probe_requests"}, file, "rates.saturation", hint);
    if (!j.value("trace", std::string()).empty()) fail("rates", "is chosen from saturation, but a trace replays its own arrivals: drop one");
    SaturationRates sat;
    const JsonFields f = fields(s, "rates.saturation.");
    sat.points = static_cast<int>(f.integer("points", 1, 64, sat.points));
    sat.probe_requests = static_cast<int>(f.integer("probe_requests", 0, 100000, sat.probe_requests));
    sat.from = f.number("from", 1e-3, 100, sat.from);
    sat.to = f.number("to", 1e-3, 100, sat.to);
    if (sat.to < sat.from) fail("rates.saturation.to", "is below 'from': the rates run from 'from' × the slowest saturation to 'to' × the fastest");
    if (sat.points == 1 && sat.to != sat.from) fail("rates.saturation.points", "is 1: give 'from' and 'to' equal, or ask for more points");
    c.saturation = sat;
  } else {
    if (c.trace.empty() && (!j.contains("rates") || !j["rates"].is_array() || j["rates"].empty()))
      fail("rates", "must list total arrival rates, or be {\"saturation\": {}} to choose them from measured service (or give a trace)");
    for (const auto& r : j.value("rates", nlohmann::json::array())) {
      if (!r.is_number() || r.get<double>() <= 0) fail("rates", "must hold positive requests per second");
      c.rates.push_back(r.get<double>());
    }
  }
  c.repeats = static_cast<int>(top.integer("repeats", 1, kMaxRepeats, 1));
  c.workload.seed = static_cast<std::uint64_t>(top.integer("seed", 0, std::int64_t{1} << 53, 1));
  c.workload.alpha = top.number("alpha", 0, 1, 1.0);
  if (!(c.workload.alpha > 0 && c.workload.alpha <= 1))
    fail("alpha", "must be in (0, 1]: 1 spreads requests evenly over the targets, smaller values skew them towards the first "
                  "(S-LoRA's and ExpertWeave's convention)");
  c.workload.duration_seconds = top.number("duration_seconds", 0, kMaxDuration, 60.0);
  if (c.saturation && !(c.workload.duration_seconds > 0))
    fail("duration_seconds", "is 0: rates chosen from saturation need an arrival window to run them in");
  // Every run ends: its arrivals are bounded, whatever the rate.
  for (double rate : c.rates)
    if (rate * c.workload.duration_seconds > kMaxRequests)
      fail("rates", "asks for about " + std::to_string(rate * c.workload.duration_seconds) +
                        " requests in a run (rate × duration_seconds); a run holds at most " + std::to_string(kMaxRequests));
  auto range = [&](const char* key, LengthRange fallback) {
    if (!j.contains(key)) return fallback;
    const auto& r = j[key];
    if (!r.is_array() || r.size() != 2 || !json_int_in(r[0], 1, kMaxTokens) || !json_int_in(r[1], 1, kMaxTokens) || r[1].get<std::int64_t>() < r[0].get<std::int64_t>())
      fail(key, "must be [min, max] with 1 ≤ min ≤ max ≤ " + std::to_string(kMaxTokens));
    return LengthRange{r[0].get<std::int64_t>(), r[1].get<std::int64_t>()};
  };
  c.workload.prompt = range("prompt", {20, 20});
  c.workload.output = range("output", {25, 25});

  if (!j.contains("strategies") || !j["strategies"].is_array() || j["strategies"].empty())
    fail("strategies", "must list at least one strategy");
  for (std::size_t i = 0; i < j["strategies"].size(); ++i) {
    const auto& s = j["strategies"][i];
    const std::string where = "strategies[" + std::to_string(i) + "]";
    if (!s.is_object()) fail(where, "must be an object with a kind");
    check_keys(s, {"kind", "capacity", "policy", "shares", "budget", "hit", "miss", "single_target", "resident_sets", "max_sequences",
                   "max_batch_tokens", "admission", "switching", "max_wait_seconds", "park", "residency_seconds", "kv_admission", "kv_context", "kv_requests", "calibration", "staging",
                   "update_every", "decay", "shift", "swap_ahead", "name"},
               file, where, hint);
    StrategyConfig sc;
    const auto kind = parse_strategy(s.value("kind", ""));
    if (!kind) {
      std::string names;
      for (auto n : strategy_names()) names += (names.empty() ? "" : ", ") + std::string(n);
      fail(where + ".kind", "is '" + s.value("kind", "") + "'; use one of " + names);
    }
    sc.kind = *kind;
    if (s.contains("policy")) {
      const auto policy = s["policy"].is_string() ? parse_policy(s["policy"].get<std::string>()) : std::nullopt;
      if (policy == Policy::Hybrid) fail(where + ".policy", "is hybrid, which is a strategy, not a consolidation policy; use kind \"hybrid\"");
      if (!policy) fail(where + ".policy", "must be round-robin, medoid or weighted");
      sc.policy = *policy;
    }
    if (s.contains("shares")) {
      if (!s["shares"].is_array()) fail(where + ".shares", "must be a list of positive numbers, one per variant");
      for (const auto& v : s["shares"]) {
        if (!v.is_number() || v.get<double>() <= 0) fail(where + ".shares", "must be a list of positive numbers, one per variant");
        sc.shares.push_back(v.get<double>());
      }
    }
    if (s.contains("budget")) {
      const auto b = s["budget"].is_string() ? parse_byte_size(s["budget"].get<std::string>()) : std::nullopt;
      if (!b)
        fail(where + ".budget", s["budget"].is_string() ? byte_size_problem(s["budget"].get<std::string>()) + "; write a byte size such as \"2GiB\""
                                                        : "must be a byte size such as \"2GiB\"");
      sc.budget_bytes = b;
    }
    const auto hit = parse_hit_policy(s.value("hit", "consolidated"));
    if (!hit) fail(where + ".hit", "must be consolidated or strict");
    sc.hit = *hit;
    sc.miss = s.value("miss", "transient");
    if (!make_miss_policy(sc.miss)) fail(where + ".miss", "must be " + miss_policy_choices());
    sc.single_target = s.value("single_target", "");
    // Each bounded by what it can mean (set-buffer counts and sizes are multiplied into the budget).
    const JsonFields f = fields(s, where + ".");
    auto count = [&](const char* key, std::int64_t fallback, std::int64_t min, std::int64_t max = kMaxTokens) {
      return f.integer(key, min, max, fallback);
    };
    if (s.contains("capacity")) sc.capacity = count("capacity", 0, 0, std::int64_t{1} << 31);
    if (s.contains("resident_sets") && s["resident_sets"].is_string()) {
      if (s["resident_sets"] != "auto") fail(where + ".resident_sets", "must be auto or a whole number from 1 to 1024");
      sc.resident_sets = RuntimeConfig::kAutoSets;
    } else {
      sc.resident_sets = static_cast<int>(count("resident_sets", RuntimeConfig::kAutoSets, 1, 1024));  // absent: auto
    }
    sc.scheduler.max_sequences = count("max_sequences", sc.scheduler.max_sequences, 1);
    sc.scheduler.max_batch_tokens = count("max_batch_tokens", sc.scheduler.max_batch_tokens, 1);
    sc.reserve.prefill_chunk = sc.scheduler.max_batch_tokens;  // the activation workspace one step needs
    sc.reserve.requests = count("kv_requests", sc.reserve.requests, 1);
    sc.reserve.context_tokens = count("kv_context", sc.reserve.context_tokens, 1);
    // "admission" ("switching" is its older spelling): affinity unless the config asks for the paper's fcfs.
    if (s.contains("admission") && s.contains("switching")) fail(where + ".switching", "is the older name of admission: give one of them");
    const char* admission_key = s.contains("switching") ? "switching" : "admission";
    if (s.contains(admission_key) && !s[admission_key].is_string()) fail(where + "." + admission_key, "must be fcfs or affinity");
    const std::string admission = s.value(admission_key, "affinity");
    if (admission != "fcfs" && admission != "affinity") fail(where + "." + admission_key, "must be fcfs or affinity");
    sc.scheduler.switching = admission == "fcfs" ? SwitchPolicy::Fcfs : SwitchPolicy::Affinity;
    sc.scheduler.max_wait_seconds = f.number_from("max_wait_seconds", 0, false, sc.scheduler.max_wait_seconds);
    if (s.contains("park")) {
      if (!s["park"].is_boolean()) fail(where + ".park", "must be true or false");
      sc.scheduler.park = s["park"].get<bool>();
    }
    sc.scheduler.residency_seconds = f.number_from("residency_seconds", 0, false, sc.scheduler.residency_seconds);
    if (s.contains("kv_admission")) {
      const auto a = s["kv_admission"].is_string() ? parse_kv_admission(s["kv_admission"].get<std::string>()) : std::nullopt;
      if (!a) fail(where + ".kv_admission", "must be greedy or reserve");
      sc.scheduler.kv_admission = *a;
    }
    if (s.contains("swap_ahead")) {
      if (!s["swap_ahead"].is_boolean()) fail(where + ".swap_ahead", "must be true or false");
      if (s["swap_ahead"].get<bool>() && (sc.kind == StrategyKind::TimeSharing || sc.kind == StrategyKind::SpaceSharing))
        fail(where + ".swap_ahead", std::string("does not apply to ") + std::string(strategy_name(sc.kind)) +
                                        ": its swaps reload the experts a step reads, or run on a slice's slowed link; leave it out");
      if (s["swap_ahead"].get<bool>() && sc.resident_sets == 1)
        fail(where + ".swap_ahead", "fills a free set buffer ahead, and with resident_sets 1 there is none; set resident_sets to 2 or more, or auto");
      sc.scheduler.swap_ahead = s["swap_ahead"].get<bool>();
    }
    // virtual-experts: the planner's calibration text (relative to the config) and how sets update.
    const bool virtual_experts = sc.kind == StrategyKind::VirtualExperts;
    for (const char* key : {"calibration", "staging", "update_every", "decay", "shift"})
      if (s.contains(key) && !virtual_experts) fail(where + "." + key, "belongs to the virtual-experts strategy only");
    if (s.contains("calibration")) {
      if (!s["calibration"].is_string() || s["calibration"].get<std::string>().empty())
        fail(where + ".calibration", "must be the path of a text file, relative to the config");
      const std::filesystem::path t = s["calibration"].get<std::string>();
      sc.calibration = t.is_absolute() ? t : base_dir / t;
      if (!sc.budget_bytes) fail(where + ".calibration", "plans counts for a budget: give the strategy a budget too");
    }
    sc.updates.staging = count("staging", sc.updates.staging, 0, 1 << 16);
    sc.updates.update_every = count("update_every", sc.updates.update_every, 1, std::int64_t{1} << 30);
    sc.updates.decay = f.number("decay", 0, 1, sc.updates.decay, /*min_open=*/true);
    sc.updates.shift = f.number("shift", 0, 1, sc.updates.shift, /*min_open=*/true);
    if (virtual_experts && !sc.budget_bytes && sc.capacity <= 0)
      fail(where, "virtual-experts needs a budget (with calibration: planned counts) or a capacity (uniform counts)");
    if (virtual_experts) sc.miss = "masked";
    if (s.contains("name")) {
      if (!s["name"].is_string() || s["name"].get<std::string>().empty() || s["name"].get<std::string>().size() > 80)
        fail(where + ".name", "must be a name of 1 to 80 characters: what the strategy's runs are recorded and charted as");
      sc.name = s["name"].get<std::string>();
    }
    sc.device = c.device;
    sc.cpu_weights = c.cpu_weights;
    c.strategies.push_back(sc);
  }
  name_strategies_apart(j["strategies"], c.strategies, fail);
  return c;
}
}  // namespace

namespace {

// What is recorded with every run says what an override set, as if the config had said so.
void record_override(SweepConfig& config, const char* key, const std::string& value) {
  auto j = nlohmann::ordered_json::parse(config.text, nullptr, false);
  if (!j.is_object()) return;
  j[key] = value;
  config.text = j.dump(2);
}

}  // namespace

void set_sweep_device(SweepConfig& config, Device device) {
  if (config.clock == RunClock::Simulated)
    throw InvalidArgument("device", std::string(device_name(device)),
                          "is the engine's backend, and a simulated sweep's is a simulated device", "its device is the config's device_profile");
  config.device = device;
  for (StrategyConfig& s : config.strategies) s.device = device;
  record_override(config, "device", std::string(device_name(device)));
}

void set_sweep_cpu_weights(SweepConfig& config, CpuWeights weights) {
  if (config.clock == RunClock::Simulated)
    throw InvalidArgument("--cpu-weights", std::string(cpu_weights_name(weights)), "is how the CPU backend holds weights, and a simulated sweep reads no weights",
                          "leave it out");
  config.cpu_weights = weights;
  for (StrategyConfig& s : config.strategies) s.cpu_weights = weights;
  record_override(config, "cpu_weights", std::string(cpu_weights_name(weights)));
}

void set_sweep_host_budget(SweepConfig& config, std::optional<std::uint64_t> bytes) {
  if (config.clock == RunClock::Simulated)
    throw InvalidArgument("--host-budget", "", "is the engine's host tier, and a simulated sweep reads no weights", "leave it out");
  config.host_budget = bytes;
  record_override(config, "host_budget", bytes ? std::to_string(*bytes) : std::string("all"));  // exact: the record can be run again
}

SweepConfig parse_sweep_config(const std::string& text, const std::string& file, const std::filesystem::path& base_dir) {
  try {
    return parse_fields(text, file, base_dir);
  } catch (const nlohmann::json::exception& e) {  // a field of another JSON type than asked for
    throw FormatError(file, "", std::string("has a field of the wrong type: ") + e.what(), "see sample_configs/paper-qos.json");
  }
}

}  // namespace mosaic
