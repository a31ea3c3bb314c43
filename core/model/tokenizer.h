#pragma once
// HF tokenizer.json files: byte-level BPE (GPT-2 and what forge trains; DeepSeek-V2/V3, Llama 3 and
// Qwen with their chains of Split and Digits steps) and the Metaspace BPE with byte fallback that
// Llama 2 and Mixtral ship. Encodes and decodes exactly as HF tokenizers does for these pipelines;
// anything else in the file is refused with UnsupportedError naming the field.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mosaic {

class PreTokenizer;

class Tokenizer {
 public:
  enum class Kind { ByteLevel, Metaspace };

  // Throws IoError, FormatError (bad JSON, a merge of unknown tokens), UnsupportedError.
  static Tokenizer load(const std::filesystem::path& tokenizer_json);
  static Tokenizer parse(std::string_view json_text, const std::string& source);
  // A GPT-2 style byte-level BPE: ids are `specials` (added, special tokens), then the 256 byte
  // symbols, then one token per merge in order.
  static Tokenizer byte_level(const std::vector<std::string>& specials,
                              const std::vector<std::pair<std::string, std::string>>& merges);

  // add_special: apply the post-processor's template (e.g. a leading <s>), as HF's default does.
  std::vector<std::int64_t> encode(std::string_view text, bool add_special = true) const;
  // Special tokens are left out unless keep_special; invalid UTF-8 is returned as is. Each token
  // decodes on its own (as HF's decoders do), so the text of ids A then B is decode(A) followed by
  // decode(B, …, /*text_start=*/false) whenever decode(A) is not empty: text_start only lets a
  // Metaspace decoder drop the space its pre-tokenizer prepended to the text.
  std::string decode(std::span<const std::int64_t> ids, bool keep_special = false, bool text_start = true) const;

  Kind kind() const;
  // A byte-level tokenizer's pre-tokenizer (null for Metaspace): the pieces BPE runs on.
  const PreTokenizer* pre_tokenizer() const;
  std::int64_t vocab_size() const;  // one past the largest id
  std::optional<std::int64_t> id(std::string_view token) const;
  const std::string& token(std::int64_t id) const;  // throws InvalidArgument outside the vocabulary
  std::string to_json() const;                      // tokenizer.json text
  void save(const std::filesystem::path& path) const;  // atomically

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace mosaic
