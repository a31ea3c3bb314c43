// tokenizer.json, and encoding and decoding with whatever it accepted.
#include <algorithm>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const std::string_view input = fuzz::as_text(data, size);
  const auto tok = fuzz::accepted([&] { return Tokenizer::parse(input, "tokenizer.json"); });
  if (!tok) return 0;
  // Text to encode: a fixed sentence with spaces, digits and a multi-byte character, and the
  // input's own tail, which carries whatever bytes the fuzzer is trying.
  const std::vector<std::string> texts{"Hello world, 42 × 3!\n  indented", std::string(input.substr(input.size() - std::min<std::size_t>(input.size(), 64)))};
  // What Mosaic writes (forge saves tokenizers) must read back into the same tokenizer.
  const Tokenizer again = Tokenizer::parse(tok->to_json(), "written tokenizer.json");
  for (const std::string& text : texts) {
    const std::vector<std::int64_t> ids = tok->encode(text);
    for (const std::int64_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) fuzz::violated("encode gave an id outside the vocabulary");
    const std::string decoded = tok->decode(ids);
    if (again.encode(text) != ids || again.decode(ids) != decoded) fuzz::violated("tokenizer does not round-trip through to_json");
  }
  return 0;
}
