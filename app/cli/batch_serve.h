#pragma once
// A batch of requests served through one Engine, timed: what the benches that compare two ways of
// serving (bench-runtime, bench-deltas) measure each way with.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace mosaic::cli {

struct Batch {
  double seconds = 0;  // submit → every request finished
  std::int64_t requests = 0, tokens = 0;
  double tpot = 0;     // mean over the requests
  std::int64_t steps = 0, misses = 0;
};

// `targets[i]` for request i, all submitted at once with their own random prompt of `prompt` ids;
// greedy decode of `decode` tokens each, at most `max_sequences` in a step. A request that fails
// throws (DeviceError naming its target and why): a bench does not count it as served.
Batch serve(const std::shared_ptr<Runtime>& runtime, const std::vector<std::string>& targets, std::int64_t prompt, std::int64_t decode,
            std::int64_t max_sequences);

// What the runtime holds on its device: every item's bytes.
std::uint64_t device_bytes(const Runtime& rt);

}  // namespace mosaic::cli
