#pragma once
// Internal: the BPE merge loop shared by the tokenizer's pipelines. Include only from model/ .cpp files.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mosaic {

class BpeMerges {
 public:
  void add(const std::string& left, const std::string& right);  // next rank
  std::size_t size() const { return ranks_.size(); }
  const std::vector<std::pair<std::string, std::string>>& in_order() const { return order_; }

  // Merges adjacent symbols, lowest rank first and leftmost among equals, until no ranked pair is
  // left (what HF's BPE does without dropout). O(n log n) in the number of symbols.
  std::vector<std::string> apply(std::vector<std::string> symbols) const;

 private:
  static std::string key(std::string_view a, std::string_view b);
  int rank(std::string_view a, std::string_view b) const;  // -1 when not a merge
  std::unordered_map<std::string, int> ranks_;
  std::vector<std::pair<std::string, std::string>> order_;
};

}  // namespace mosaic
