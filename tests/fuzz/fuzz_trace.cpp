// Workload traces (JSON Lines): arrivals, targets, prompt ids and lengths.
#include "fuzz_target.h"
#include "serving/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const auto trace = fuzz::accepted([&] { return parse_trace(fuzz::as_text(data, size), "trace.jsonl"); });
  if (!trace) return 0;
  double last = 0;
  for (const WorkloadRequest& r : *trace) {
    if (r.arrival < last || r.max_new_tokens < 0 || r.prompt.empty()) fuzz::violated("an invalid request was accepted");
    for (const auto id : r.prompt)
      if (id < 0) fuzz::violated("a negative token id was accepted");
    last = r.arrival;
  }
  return 0;
}
