#include "cli/batch_serve.h"

#include <chrono>
#include <random>

#include "common/error.h"
#include "common/stopwatch.h"
#include "runtime/engine.h"

namespace mosaic::cli {

Batch serve(const std::shared_ptr<Runtime>& runtime, const std::vector<std::string>& targets, std::int64_t prompt, std::int64_t decode,
            std::int64_t max_sequences) {
  Engine engine(runtime, {.scheduler = {.max_sequences = max_sequences}});
  std::mt19937_64 rng(11);
  std::vector<ServeRequest> requests;
  for (const std::string& t : targets) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(prompt));
    for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(runtime->store().spec().vocab_size));
    requests.push_back({t, {.prompt = ids, .max_new_tokens = decode}});
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto handles = engine.submit_all(std::move(requests));
  Batch b;
  b.requests = static_cast<std::int64_t>(handles.size());
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const RequestResult& r = handles[i]->wait();
    // A failed request would count as served: the bench stops instead, saying why.
    if (!r.error.empty()) throw DeviceError("bench", targets[i], "a request failed: " + r.error);
    b.tokens += static_cast<std::int64_t>(r.tokens.size());
    b.tpot += r.stats.tpot() / static_cast<double>(handles.size());
    b.misses += r.stats.counters.total().misses;
  }
  b.seconds = seconds_since(t0);
  b.steps = engine.stats().steps;
  return b;
}

std::uint64_t device_bytes(const Runtime& rt) {
  std::uint64_t n = 0;
  for (const DeviceItem& item : rt.device_items()) n += item.bytes;
  return n;
}

}  // namespace mosaic::cli
