// Sweep configs (mosaic.sweep/1): variants, rates, strategies, prompts and their bounds.
#include <string>

#include "fuzz_target.h"
#include "serving/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const std::string text(fuzz::as_text(data, size));
  fuzz::accepted([&] { return parse_sweep_config(text, "sweep.json", "/fuzz"); });
  return 0;
}
