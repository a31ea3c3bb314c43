#pragma once
// HF tokenizers' pre-tokenizers for byte-level BPE: ByteLevel alone (GPT-2, GPT-NeoX, OLMoE) or a
// Sequence of Split and Digits steps ending in ByteLevel (DeepSeek-V2 and V3, Llama 3, Qwen2 and 3,
// StarCoder). Cuts a text into the pieces BPE then runs on, as HF's pipeline does, before the bytes
// are mapped to their symbols.
#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mosaic {

class PreTokenizer {
 public:
  // `j` is tokenizer.json's `pre_tokenizer` (source names the file). Throws UnsupportedError for a
  // step Mosaic does not implement or a chain that does not end in ByteLevel, FormatError for a
  // malformed step, both naming the field.
  static PreTokenizer byte_level(const nlohmann::json& j, const std::string& source);

  // The pieces of `text`, in order. Joined they are `text`, with a space before each piece that
  // ByteLevel's add_prefix_space gave one.
  std::vector<std::string> split(std::string_view text) const;

  struct Step;

 private:
  std::shared_ptr<const std::vector<Step>> steps_;  // shared: a Tokenizer's copies share one chain
};

}  // namespace mosaic
