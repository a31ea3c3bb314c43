#include "serving/workload.h"

#include "common/json_int.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/jsonl.h"

namespace mosaic {
namespace {

// Uniform in [0, 1) from 53 random bits: the same sequence with any standard library.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

std::int64_t uniform_in(std::mt19937_64& rng, const LengthRange& r) {
  return r.min + static_cast<std::int64_t>(uniform01(rng) * static_cast<double>(r.max - r.min + 1));
}

void check_range(const LengthRange& r, const char* field) {
  if (r.min < 1 || r.max < r.min)
    throw InvalidArgument("workload", field, "is [" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]",
                          "give 1 ≤ min ≤ max");
}

}  // namespace

std::vector<double> power_law_shares(std::size_t targets, double alpha) {
  if (!(alpha > 0 && alpha <= 1))
    throw InvalidArgument("workload", "alpha", "is " + std::to_string(alpha) + ", outside (0, 1]",
                          "α = 1 spreads requests evenly; smaller α skews them towards the first targets (S-LoRA, ExpertWeave)");
  // The CDF of numpy's power distribution, x^α on [0, 1], cut into n equal bins.
  std::vector<double> s(targets);
  const auto n = static_cast<double>(targets);
  for (std::size_t i = 0; i < targets; ++i)
    s[i] = std::pow(static_cast<double>(i + 1) / n, alpha) - std::pow(static_cast<double>(i) / n, alpha);
  return s;
}

std::vector<double> target_rates(const WorkloadSpec& spec) {
  if (spec.targets.empty()) throw InvalidArgument("workload", "targets", "is empty", "name at least one variant");
  if (!spec.rates.empty()) {
    if (spec.rates.size() != spec.targets.size())
      throw InvalidArgument("workload", "rates", std::to_string(spec.rates.size()) + " rates for " +
                                                     std::to_string(spec.targets.size()) + " targets",
                            "give one rate per target, or a total rate and a skew");
    for (double r : spec.rates)
      if (!(r >= 0) || !std::isfinite(r)) throw InvalidArgument("workload", "rates", "holds " + std::to_string(r), "rates are requests per second ≥ 0");
    return spec.rates;
  }
  if (!(spec.total_rate >= 0) || !std::isfinite(spec.total_rate))
    throw InvalidArgument("workload", "total_rate", "is " + std::to_string(spec.total_rate), "give requests per second ≥ 0");
  auto r = power_law_shares(spec.targets.size(), spec.alpha);
  for (double& x : r) x *= spec.total_rate;
  return r;
}

std::vector<WorkloadRequest> generate_workload(const WorkloadSpec& spec) {
  const auto rates = target_rates(spec);
  check_range(spec.prompt, "prompt length");
  check_range(spec.output, "output length");
  if (spec.vocab_size < 1) throw InvalidArgument("workload", "vocab_size", "is not set", "take it from the model's config");
  if (!(spec.duration_seconds >= 0)) throw InvalidArgument("workload", "duration", "is negative");
  std::vector<std::pair<std::size_t, WorkloadRequest>> all;  // (target index, request) for stable ties
  for (std::size_t t = 0; t < spec.targets.size(); ++t) {
    if (rates[t] <= 0) continue;
    std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ull + t + 1);
    for (double at = 0;;) {
      at += -std::log1p(-uniform01(rng)) / rates[t];  // exponential inter-arrival times
      if (at >= spec.duration_seconds) break;
      WorkloadRequest r;
      r.arrival = at;
      r.target = spec.targets[t];
      r.prompt.resize(static_cast<std::size_t>(uniform_in(rng, spec.prompt)));
      for (auto& id : r.prompt) id = static_cast<std::int64_t>(uniform01(rng) * static_cast<double>(spec.vocab_size));
      r.max_new_tokens = uniform_in(rng, spec.output);
      all.emplace_back(t, std::move(r));
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second.arrival < b.second.arrival || (a.second.arrival == b.second.arrival && a.first < b.first);
  });
  std::vector<WorkloadRequest> out;
  out.reserve(all.size());
  for (auto& [t, r] : all) out.push_back(std::move(r));
  return out;
}

void write_trace(const std::filesystem::path& path, const std::vector<WorkloadRequest>& requests) {
  write_file_atomically(path, [&](std::ostream& out) {
    for (const WorkloadRequest& r : requests)
      out << nlohmann::json{{"arrival", r.arrival}, {"target", r.target}, {"prompt", r.prompt}, {"max_new_tokens", r.max_new_tokens}}.dump()
          << "\n";
  });
}

namespace {

// One request line of a trace, checked as it is read.
WorkloadRequest trace_request(const std::string& file, const std::string& where, const nlohmann::json& j,
                              const std::vector<WorkloadRequest>& before) {
  auto field = [&](const char* key, bool ok) -> const nlohmann::json& {
    if (!j.contains(key) || !ok) throw FormatError(file, where + ": field '" + key + "'", "is missing or of the wrong type");
    return j[key];
  };
  WorkloadRequest r;
  r.arrival = field("arrival", j.contains("arrival") && j["arrival"].is_number()).get<double>();
  r.target = field("target", j.contains("target") && j["target"].is_string()).get<std::string>();
  const auto& prompt = field("prompt", j.contains("prompt") && j["prompt"].is_array() && !j["prompt"].empty());
  // Checked as the file is read, not found later inside a run that "finished": ids are token ids
  // (the vocabulary is checked against the model when the sweep starts), lengths are bounded.
  constexpr std::int64_t kMaxTokens = std::int64_t{1} << 20;
  constexpr std::int64_t kMaxId = std::int64_t{1} << 62;
  for (const auto& id : prompt) {
    if (!json_int_in(id, 0, kMaxId))
      throw FormatError(file, where + ": field 'prompt'", "holds " + id.dump() + ", which is not a token id (an integer ≥ 0)");
    r.prompt.push_back(id.get<std::int64_t>());
  }
  const auto& max_new = field("max_new_tokens", j.contains("max_new_tokens") && j["max_new_tokens"].is_number_integer());
  if (!json_int_in(max_new, 0, kMaxTokens))
    throw FormatError(file, where + ": field 'max_new_tokens'", "is " + max_new.dump() + "; it must be from 0 to " + std::to_string(kMaxTokens));
  r.max_new_tokens = max_new.get<std::int64_t>();
  if (!std::isfinite(r.arrival) || r.arrival > 1e7)
    throw FormatError(file, where + ": field 'arrival'", "is " + j["arrival"].dump() + " s; a trace spans at most 10^7 s");
  if (r.arrival < 0 || (!before.empty() && r.arrival < before.back().arrival))
    throw FormatError(file, where + ": field 'arrival'", "goes back in time", "sort the trace by arrival");
  return r;
}

}  // namespace

std::vector<WorkloadRequest> read_trace(const std::filesystem::path& path) {
  std::vector<WorkloadRequest> out;
  read_jsonl(path, "write one request object per line",
             [&](const std::string& where, const nlohmann::json& j) { out.push_back(trace_request(path.string(), where, j, out)); });
  return out;
}

std::vector<WorkloadRequest> parse_trace(std::string_view text, const std::string& file) {
  std::vector<WorkloadRequest> out;
  for_each_jsonl_line(text, file, "write one request object per line",
                      [&](const std::string& where, const nlohmann::json& j) { out.push_back(trace_request(file, where, j, out)); });
  return out;
}

}  // namespace mosaic
