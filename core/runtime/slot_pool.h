#pragma once
// The bookkeeping of a set of expert slots on the device: what each slot holds and when it was last
// used. Storage lives in the backend. One MoE layer's pool holds pinned slots (resident copies,
// never evicted) and spare slots (kept by a miss policy, evicted least recently used first); one
// scratch pool, shared by every layer, holds experts loaded for one step and dropped after it.
#include <cstdint>
#include <vector>

#include "runtime/expert_source.h"
#include "runtime/host_store.h"

namespace mosaic {

class SlotPool {
 public:
  enum class Role { Pinned, Spare, Scratch };

  SlotPool(std::int64_t pinned, std::int64_t spare, std::int64_t scratch);

  std::int64_t size() const { return static_cast<std::int64_t>(slots_.size()); }
  Role role(std::int64_t slot) const;
  std::int64_t count(Role role) const;
  const ExpertSource& source(std::int64_t slot) const { return at(slot).source; }
  ExpertId content(std::int64_t slot) const { return at(slot).content; }  // -1 when empty

  // Records that `slot` now holds `content` (from `source`); the backend has copied it there.
  // `ahead`: the prefetch policy loaded it before its layer routed; the first pair to hit it
  // settles it, which is how a prefetch is known to have been used.
  void fill(std::int64_t slot, const ExpertSource& source, ExpertId content, bool ahead = false);
  bool ahead(std::int64_t slot) const { return at(slot).ahead; }
  void settle(std::int64_t slot) { slots_[static_cast<std::size_t>(slot)].ahead = false; }
  void clear(std::int64_t slot);
  // A family change: the same bytes under the next store's ids; the use time stays.
  void renumber(std::int64_t slot, const ExpertSource& source, ExpertId content) {
    slots_[static_cast<std::size_t>(slot)].source = source;
    slots_[static_cast<std::size_t>(slot)].content = content;
  }
  // Use times: a tick per use. A step notes now() as it starts; slots with last_use() > that are
  // in use by the step and must not be evicted.
  std::uint64_t now() const { return tick_; }
  std::uint64_t last_use(std::int64_t slot) const { return at(slot).last_use; }
  void touch(std::int64_t slot) { slots_[static_cast<std::size_t>(slot)].last_use = ++tick_; }

 private:
  struct Slot {
    ExpertSource source;
    ExpertId content = -1;
    std::uint64_t last_use = 0;
    bool ahead = false;
  };
  const Slot& at(std::int64_t slot) const { return slots_[static_cast<std::size_t>(slot)]; }
  std::int64_t pinned_, spare_;
  std::vector<Slot> slots_;
  std::uint64_t tick_ = 0;
};

}  // namespace mosaic
