#pragma once
// Partial runtime reconfiguration (Multi-MoE §3.2), generalized to K resident sets: up to K
// "resident sets" — a target's non-expert weights (embeddings, attention, norms, routers, shared
// experts, lm_head), or under time-sharing its whole model — sit in K device buffers. A step that
// needs a set not resident copies it over the least recently used buffer no other set of the step
// needs. Bookkeeping only: the runtime copies, times and counts.
#include <cstdint>
#include <span>
#include <vector>

namespace mosaic {

class Reconfigurer {
 public:
  explicit Reconfigurer(int buffers);

  int buffers() const { return static_cast<int>(held_.size()); }
  int buffer_of(int set) const;        // -1 when not resident
  std::vector<int> resident() const;   // the sets held, by buffer
  // Makes every set of `sets` resident (there must be at most buffers() distinct ones) and returns
  // the (buffer, set) fills that takes, in order.
  std::vector<std::pair<int, int>> ensure(std::span<const int> sets);
  // Look-ahead: a buffer for `set` among those the last ensure() did not need and that hold none of
  // `keep` (sets wanted sooner), empty first, else the least recently used; it now holds `set`. -1
  // when `set` is resident already or no buffer qualifies.
  int ahead(int set, std::span<const int> keep = {});
  void forget(int buffer) { held_[static_cast<std::size_t>(buffer)] = -1; }  // a fill that failed
  // A family change: each buffer's set by its id in the next store (`next[set]`, -1: gone, so empty).
  void renumber(std::span<const int> next) {
    for (int& set : held_)
      if (set >= 0) set = next[static_cast<std::size_t>(set)];
  }

 private:
  // The buffer to fill: empty, else LRU; never one used at `busy` or holding one of `keep`.
  int victim(std::uint64_t busy, std::span<const int> keep = {}) const;
  std::vector<int> held_;
  std::vector<std::uint64_t> last_use_;
  std::uint64_t tick_ = 0;
};

}  // namespace mosaic
