#pragma once
// Request workloads for the QoS experiments: one Poisson process per target variant, with rates
// given or split from a total by a power-law skew (as S-LoRA and ExpertWeave do), fixed or sampled
// prompt and output lengths, and JSONL traces to save and replay. Seeded and deterministic: each
// target draws from its own generator, so adding a target leaves the others' arrivals unchanged.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mosaic {

struct LengthRange {
  std::int64_t min = 20, max = 20;  // uniform in [min, max]; equal bounds: fixed
};

struct WorkloadSpec {
  std::vector<std::string> targets;
  std::vector<double> rates;     // requests/s per target; empty: total_rate split by the skew
  double total_rate = 1.0;       // requests/s over all targets
  // Skew as S-LoRA and ExpertWeave sample it (numpy's power distribution, shape α): target i of n
  // gets ((i + 1)/n)^α − (i/n)^α of the requests. α = 1: uniform; smaller α, heavier skew towards
  // the first targets. In (0, 1].
  double alpha = 1.0;
  double duration_seconds = 60;  // arrivals in [0, duration)
  LengthRange prompt{20, 20}, output{25, 25};  // the paper: 20 prompt tokens, 25 output tokens
  std::int64_t vocab_size = 0;   // prompt ids are uniform in [0, vocab_size)
  std::uint64_t seed = 1;
};

struct WorkloadRequest {
  double arrival = 0;  // seconds from the start of the run
  std::string target;
  std::vector<std::int64_t> prompt;
  std::int64_t max_new_tokens = 0;
};

std::vector<double> power_law_shares(std::size_t targets, double alpha);  // sums to 1; throws for α outside (0, 1]
std::vector<double> target_rates(const WorkloadSpec& spec);              // requests/s per target

// Every target's arrivals merged in time order (ties: target order). Throws InvalidArgument for an
// empty target list, negative or mismatched rates, a bad length range or no vocabulary.
std::vector<WorkloadRequest> generate_workload(const WorkloadSpec& spec);

// One JSON object per line: {"arrival", "target", "prompt": [ids], "max_new_tokens"}. Atomic.
void write_trace(const std::filesystem::path& path, const std::vector<WorkloadRequest>& requests);
// Throws IoError, or FormatError naming the line and field; arrivals must not go backwards.
std::vector<WorkloadRequest> read_trace(const std::filesystem::path& path);
// The same from the file's text; `file` names it in errors.
std::vector<WorkloadRequest> parse_trace(std::string_view text, const std::string& file);

}  // namespace mosaic
