#pragma once
// Trains a byte-level BPE (GPT-2's pre-tokenization, merges by pair frequency) on text.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace mosaic {

// `vocab_size` counts the specials and the 256 byte tokens, so it must exceed specials + 256.
// Ties between equally frequent pairs go to the lexicographically smallest, so a corpus always
// gives the same tokenizer. Throws InvalidArgument for a vocabulary too small.
Tokenizer train_byte_level_bpe(const std::vector<std::string_view>& texts, std::int64_t vocab_size,
                               const std::vector<std::string>& specials);

}  // namespace mosaic
