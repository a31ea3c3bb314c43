#include "runtime/reconfigurer.h"

#include <algorithm>

#include "common/error.h"

namespace mosaic {

Reconfigurer::Reconfigurer(int buffers) : held_(static_cast<std::size_t>(buffers), -1), last_use_(held_.size(), 0) {
  if (buffers < 1) throw InvalidArgument("runtime", "resident sets", "must be at least 1");
}

int Reconfigurer::buffer_of(int set) const {
  const auto it = std::find(held_.begin(), held_.end(), set);
  return it == held_.end() ? -1 : static_cast<int>(it - held_.begin());
}

std::vector<int> Reconfigurer::resident() const { return held_; }

int Reconfigurer::victim(std::uint64_t busy, std::span<const int> keep) const {
  int victim = -1;
  for (std::size_t b = 0; b < held_.size(); ++b) {
    if (last_use_[b] == busy || std::find(keep.begin(), keep.end(), held_[b]) != keep.end()) continue;
    if (held_[b] < 0) return static_cast<int>(b);
    if (victim < 0 || last_use_[b] < last_use_[static_cast<std::size_t>(victim)]) victim = static_cast<int>(b);
  }
  return victim;
}

int Reconfigurer::ahead(int set, std::span<const int> keep) {
  if (buffer_of(set) >= 0) return -1;
  const int b = victim(tick_ > 0 ? tick_ : ~std::uint64_t{0}, keep);  // before any step, every buffer is free
  if (b < 0) return -1;
  held_[static_cast<std::size_t>(b)] = set;
  last_use_[static_cast<std::size_t>(b)] = tick_;  // the next step's victim only if nothing older is free
  return b;
}

std::vector<std::pair<int, int>> Reconfigurer::ensure(std::span<const int> sets) {
  const std::uint64_t now = ++tick_;
  for (int set : sets)
    if (const int b = buffer_of(set); b >= 0) last_use_[static_cast<std::size_t>(b)] = now;
  std::vector<std::pair<int, int>> fills;
  for (int set : sets) {
    if (buffer_of(set) >= 0) continue;
    const int victim = this->victim(now);
    if (victim < 0)
      throw InvalidArgument("runtime", "step", "needs more resident sets than the " + std::to_string(buffers()) + " buffers hold");
    held_[static_cast<std::size_t>(victim)] = set;
    last_use_[static_cast<std::size_t>(victim)] = now;
    fills.emplace_back(victim, set);
  }
  return fills;
}

}  // namespace mosaic
