#include "runtime/slot_pool.h"

namespace mosaic {

SlotPool::SlotPool(std::int64_t pinned, std::int64_t spare, std::int64_t scratch)
    : pinned_(pinned), spare_(spare), slots_(static_cast<std::size_t>(pinned + spare + scratch)) {}

SlotPool::Role SlotPool::role(std::int64_t slot) const {
  return slot < pinned_ ? Role::Pinned : slot < pinned_ + spare_ ? Role::Spare : Role::Scratch;
}

std::int64_t SlotPool::count(Role r) const {
  return r == Role::Pinned ? pinned_ : r == Role::Spare ? spare_ : size() - pinned_ - spare_;
}

void SlotPool::fill(std::int64_t slot, const ExpertSource& source, ExpertId content, bool ahead) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  s.source = source;
  s.content = content;
  s.ahead = ahead;
  touch(slot);
}

void SlotPool::clear(std::int64_t slot) {
  Slot& s = slots_[static_cast<std::size_t>(slot)];
  s.source = {};
  s.content = -1;
  s.ahead = false;
}

}  // namespace mosaic
