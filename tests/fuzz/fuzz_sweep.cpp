// Sweep configs (mosaic.sweep/1): variants, rates, strategies, prompts and their bounds; and the
// files a simulated sweep names: device profiles (mosaic.device/1) and routing models
// (mosaic.routing/1), which must round-trip once accepted.
#include <string>

#include "fuzz_target.h"
#include "serving/sweep.h"
#include "sim/device_profile.h"
#include "sim/routing_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const std::string text(fuzz::as_text(data, size));
  fuzz::accepted([&] { return parse_sweep_config(text, "sweep.json", "/fuzz"); });
  fuzz::accepted([&] { return parse_device_profile(text, "device.json"); });
  if (const auto r = fuzz::accepted([&] { return parse_routing_model(text, "routing.json"); }))
    if (routing_model_json(parse_routing_model(routing_model_json(*r), "again.json")) != routing_model_json(*r))
      fuzz::violated("a routing model does not round-trip");
  return 0;
}
