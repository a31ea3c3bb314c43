#include "model/bpe.h"

#include <queue>
#include <tuple>

namespace mosaic {

std::string BpeMerges::key(std::string_view a, std::string_view b) {
  std::string k;
  k.reserve(a.size() + b.size() + 1);
  k.append(a).push_back('\0');  // no token holds NUL, so the pair is unambiguous
  k.append(b);
  return k;
}

void BpeMerges::add(const std::string& left, const std::string& right) {
  ranks_.emplace(key(left, right), static_cast<int>(order_.size()));
  order_.emplace_back(left, right);
}

int BpeMerges::rank(std::string_view a, std::string_view b) const {
  const auto it = ranks_.find(key(a, b));
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<std::string> BpeMerges::apply(std::vector<std::string> symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2 || ranks_.empty()) return symbols;
  std::vector<int> prev(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    prev[static_cast<std::size_t>(i)] = i - 1;
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<bool> alive(static_cast<std::size_t>(n), true);
  // (rank, left position): the heap pops the lowest rank, then the leftmost pair.
  using Candidate = std::tuple<int, int>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int left) {
    if (left < 0) return;
    const int right = next[static_cast<std::size_t>(left)];
    if (right < 0) return;
    const int r = rank(symbols[static_cast<std::size_t>(left)], symbols[static_cast<std::size_t>(right)]);
    if (r >= 0) heap.emplace(r, left);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [r, left] = heap.top();
    heap.pop();
    const auto l = static_cast<std::size_t>(left);
    if (!alive[l] || next[l] < 0) continue;
    const auto right = static_cast<std::size_t>(next[l]);
    // Stale entries (either side merged since) no longer hold this rank.
    if (rank(symbols[l], symbols[right]) != r) continue;
    symbols[l] += symbols[right];
    alive[right] = false;
    next[l] = next[right];
    if (next[l] >= 0) prev[static_cast<std::size_t>(next[l])] = left;
    push(prev[l]);
    push(left);
  }
  std::vector<std::string> out;
  for (int i = 0; i >= 0 && i < n; i = next[static_cast<std::size_t>(i)]) out.push_back(std::move(symbols[static_cast<std::size_t>(i)]));
  return out;
}

}  // namespace mosaic
