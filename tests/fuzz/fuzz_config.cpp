// config.json → ModelSpec, for every architecture and spelling transformers writes.
#include <string>

#include "fuzz_target.h"
#include "model/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const auto spec = fuzz::accepted([&] { return parse_model_spec(fuzz::as_text(data, size), "config.json"); });
  if (!spec) return 0;
  // A config Mosaic accepted and writes back (merge, consolidate do) must read back unchanged:
  // outside the try, so a refusal here is a finding too.
  const ModelSpec again = parse_model_spec(to_config_json(*spec), "written config.json");
  if (const auto difference = first_difference(*spec, again)) fuzz::violated(("config does not round-trip: " + *difference).c_str());
  return 0;
}
