// A request body → ApiRequest (the OpenAI API's completions and chat completions), and OpenAI's
// `stop` over the text such a request could stream. The first byte picks the endpoint.
#include <algorithm>
#include <cstdint>
#include <string>

#include "fuzz_target.h"
#include "server/openai_api.h"
#include "server/stop_text.h"

namespace {

// StopText hands out exactly the text before the stop string that is complete first (the longest of
// those completed by the same character; all of the text when none appears), however the text is cut
// into pieces. The reference finds each string's first occurrence by rolling hash (Rabin-Karp), an
// algorithm other than StopText's and linear too, so a long adversarial stop string cannot hang it.
std::size_t first_occurrence(const std::string& text, const std::string& s) {
  if (s.size() > text.size()) return std::string::npos;
  constexpr std::uint64_t base = 1000003;
  std::uint64_t want = 0, have = 0, top = 1;  // top = base^(|s|-1), all modulo 2^64
  for (std::size_t i = 0; i < s.size(); ++i) {
    want = want * base + static_cast<unsigned char>(s[i]);
    have = have * base + static_cast<unsigned char>(text[i]);
    if (i > 0) top *= base;
  }
  for (std::size_t at = 0;; ++at) {
    if (have == want && text.compare(at, s.size(), s) == 0) return at;
    if (at + s.size() == text.size()) return std::string::npos;
    have = (have - top * static_cast<unsigned char>(text[at])) * base + static_cast<unsigned char>(text[at + s.size()]);
  }
}

void check_stop_text(const std::vector<std::string>& stops, const std::string& text, std::size_t cut) {
  std::size_t first_end = std::string::npos, end = text.size();
  for (const std::string& s : stops) {
    const std::size_t start = first_occurrence(text, s);
    if (start == std::string::npos) continue;
    const std::size_t e = start + s.size();
    if (e < first_end || (e == first_end && start < end)) first_end = e, end = start;
  }
  mosaic::server::StopText stop(stops);
  std::string shown;
  for (std::size_t at = 0; at < text.size() && !stop.stopped(); at += cut) shown += stop.push(std::string_view(text).substr(at, cut));
  if (!stop.stopped()) shown += stop.finish();
  if (shown != text.substr(0, end)) mosaic::fuzz::violated("StopText did not hand out exactly the text before the first stop");
  if (stop.stopped() != (first_end != std::string::npos)) mosaic::fuzz::violated("StopText stopped without a stop string, or missed one");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic::server;
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  try {
    const ApiRequest r = parse_request(mosaic::fuzz::as_text(data + 1, size - 1), chat);
    // What the server sends back must serialize (wire() is what it sends with).
    (void)wire(completion_body(r, "cmpl-1", 0, r.prompt_text, "stop", {1, 1}));
    (void)wire(stream_chunk(r, "cmpl-1", 0, r.prompt_text, std::nullopt, true));
    // The precomputed events write exactly what the chunk itself would, whatever the text.
    if (TextEvents(r, "cmpl-1", 0).event(r.prompt_text) != "data: " + wire(stream_chunk(r, "cmpl-1", 0, r.prompt_text, std::nullopt, false)) + "\n\n")
      mosaic::fuzz::violated("TextEvents differs from stream_chunk");
    if (!r.stop.empty()) check_stop_text(r.stop, r.prompt_text, 1 + data[0] / 2 % 7);
  } catch (const ApiError& e) {
    // A refusal is a 4xx with a message, in a body that serializes.
    if (e.status < 400 || e.status >= 500 || std::string(e.what()).empty()) mosaic::fuzz::violated("a refusal without a 4xx status and a message");
    (void)wire(error_body(e));
  }
  return 0;
}
