// Workbench session files (mosaic.session/1).
#include "fuzz_target.h"
#include "serving/session_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const auto session = fuzz::accepted([&] { return parse_session_file(fuzz::as_text(data, size), "session.json", "/fuzz"); });
  if (session && session->variants.empty()) fuzz::violated("a session without variants was accepted");
  return 0;
}
