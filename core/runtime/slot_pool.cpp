#include "runtime/slot_pool.h"

#include "runtime/cpu_slots.h"

namespace mosaic {

SlotPool::SlotPool(const ModelSpec& s, std::int64_t pinned, std::int64_t spare, std::int64_t scratch)
    : pinned_(pinned), spare_(spare), storage_(std::make_unique<SlotStorage>()) {
  const std::int64_t n = pinned + spare + scratch;
  sources_.resize(static_cast<std::size_t>(n));
  last_use_.resize(static_cast<std::size_t>(n), 0);
  // Uninitialized: a slot is read only after fill().
  storage_->gate_up = at::empty({n, 2 * s.expert_intermediate, s.hidden_size}, at::kFloat);
  storage_->down = at::empty({n, s.hidden_size, s.expert_intermediate}, at::kFloat);
}

SlotPool::~SlotPool() = default;
SlotPool::SlotPool(SlotPool&&) noexcept = default;
SlotPool& SlotPool::operator=(SlotPool&&) noexcept = default;

SlotPool::Role SlotPool::role(std::int64_t slot) const {
  return slot < pinned_ ? Role::Pinned : slot < pinned_ + spare_ ? Role::Spare : Role::Scratch;
}

std::int64_t SlotPool::count(Role r) const {
  return r == Role::Pinned ? pinned_ : r == Role::Spare ? spare_ : size() - pinned_ - spare_;
}

void SlotPool::fill(std::int64_t slot, const ExpertSource& source) {
  sources_[static_cast<std::size_t>(slot)] = source;
  touch(slot);
}

void SlotPool::clear(std::int64_t slot) { sources_[static_cast<std::size_t>(slot)] = {}; }

std::optional<std::int64_t> SlotPool::take(Role r) const {
  const std::int64_t begin = r == Role::Pinned ? 0 : r == Role::Spare ? pinned_ : pinned_ + spare_;
  const std::int64_t end = begin + count(r);
  std::optional<std::int64_t> lru;
  for (std::int64_t s = begin; s < end; ++s) {
    if (sources_[static_cast<std::size_t>(s)].empty()) return s;
    if (r != Role::Pinned && (!lru || last_use_[static_cast<std::size_t>(s)] < last_use_[static_cast<std::size_t>(*lru)])) lru = s;
  }
  return lru;
}

}  // namespace mosaic
