#include "forge/bpe_trainer.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "common/error.h"
#include "model/byte_level.h"

namespace mosaic {
namespace {

using Pair = std::uint64_t;
Pair pair_of(std::uint32_t a, std::uint32_t b) { return (static_cast<Pair>(a) << 32) | b; }

struct Word {
  std::vector<std::uint32_t> symbols;
  std::int64_t count = 0;
};

}  // namespace

Tokenizer train_byte_level_bpe(const std::vector<std::string_view>& texts, std::int64_t vocab_size,
                               const std::vector<std::string>& specials) {
  const auto base = static_cast<std::int64_t>(specials.size()) + 256;
  if (vocab_size <= base)
    throw InvalidArgument("BPE training", "vocab_size", std::to_string(vocab_size) + " leaves no room for merges",
                          "ask for more than " + std::to_string(base) + " (specials + 256 bytes)");
  std::unordered_map<std::string_view, std::int64_t> counts;
  for (std::string_view text : texts)
    for (std::string_view w : split_gpt2(text)) ++counts[w];
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [w, n] : counts) {
    Word word;
    for (unsigned char c : w) word.symbols.push_back(c);
    word.count = n;
    words.push_back(std::move(word));
  }
  // Distinct words in a stable order, so that the pair index below never depends on hashing.
  std::sort(words.begin(), words.end(), [](const Word& a, const Word& b) { return a.symbols < b.symbols; });

  std::vector<std::string> strings;  // symbol id → its byte-level string
  for (int b = 0; b < 256; ++b) strings.push_back(byte_symbol(static_cast<unsigned char>(b)));
  std::unordered_map<Pair, std::int64_t> pair_count;
  std::unordered_map<Pair, std::vector<std::uint32_t>> where;  // words that held the pair (may be stale)
  auto account = [&](std::uint32_t wi, std::int64_t sign) {
    const Word& w = words[wi];
    for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) {
      const Pair p = pair_of(w.symbols[i], w.symbols[i + 1]);
      pair_count[p] += sign * w.count;
      if (sign > 0) where[p].push_back(wi);
    }
  };
  for (std::uint32_t wi = 0; wi < words.size(); ++wi) account(wi, +1);

  std::vector<std::pair<std::string, std::string>> merges;
  const std::int64_t wanted = vocab_size - base;
  while (static_cast<std::int64_t>(merges.size()) < wanted) {
    Pair best = 0;
    std::int64_t best_count = 0;
    for (const auto& [p, n] : pair_count) {
      if (n <= 0) continue;
      if (n > best_count || (n == best_count && std::pair(strings[p >> 32], strings[p & 0xFFFFFFFF]) <
                                                    std::pair(strings[best >> 32], strings[best & 0xFFFFFFFF]))) {
        best = p;
        best_count = n;
      }
    }
    if (best_count == 0) break;  // every word is a single token already
    const auto a = static_cast<std::uint32_t>(best >> 32), b = static_cast<std::uint32_t>(best & 0xFFFFFFFF);
    const auto merged = static_cast<std::uint32_t>(strings.size());
    strings.push_back(strings[a] + strings[b]);
    merges.emplace_back(strings[a], strings[b]);
    std::vector<std::uint32_t> affected = std::move(where[best]);
    where.erase(best);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    for (std::uint32_t wi : affected) {
      Word& w = words[wi];
      bool has = false;
      for (std::size_t i = 0; i + 1 < w.symbols.size() && !has; ++i) has = w.symbols[i] == a && w.symbols[i + 1] == b;
      if (!has) continue;
      account(wi, -1);
      std::vector<std::uint32_t> next;
      for (std::size_t i = 0; i < w.symbols.size(); ++i) {
        if (i + 1 < w.symbols.size() && w.symbols[i] == a && w.symbols[i + 1] == b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(w.symbols[i]);
        }
      }
      w.symbols = std::move(next);
      account(wi, +1);
    }
    pair_count.erase(best);
  }
  return Tokenizer::byte_level(specials, merges);
}

}  // namespace mosaic
