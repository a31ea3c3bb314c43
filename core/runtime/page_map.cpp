#include "runtime/page_map.h"

#include <string>

#include "common/error.h"

namespace mosaic {

PageMap::PageMap(std::uint64_t slot_bytes, std::int64_t slots, std::uint64_t page_bytes)
    : slot_bytes_(slot_bytes), page_bytes_(page_bytes) {
  if (slot_bytes == 0 || page_bytes == 0 || slots < 0)
    throw InvalidArgument("virtual weight tensor", "", "needs slots of some bytes, pages of some bytes and a slot count ≥ 0");
  const std::uint64_t bytes = slot_bytes * static_cast<std::uint64_t>(slots);
  occupied_.assign(static_cast<std::size_t>(slots), false);
  references_.assign(static_cast<std::size_t>((bytes + page_bytes - 1) / page_bytes), 0);
}

void PageMap::check_slot(std::int64_t slot) const {
  if (slot < 0 || slot >= slots())
    throw InvalidArgument("virtual weight tensor", "slot " + std::to_string(slot), "is outside its " + std::to_string(slots()) + " slots");
}

std::int64_t PageMap::first_page(std::int64_t slot) const {
  check_slot(slot);
  return static_cast<std::int64_t>(slot_offset(slot) / page_bytes_);
}

std::int64_t PageMap::last_page(std::int64_t slot) const {
  check_slot(slot);
  return static_cast<std::int64_t>((slot_offset(slot) + slot_bytes_ - 1) / page_bytes_);
}

std::vector<std::int64_t> PageMap::occupy(std::int64_t slot) {
  std::vector<std::int64_t> map;
  check_slot(slot);
  if (occupied(slot)) return map;
  occupied_[static_cast<std::size_t>(slot)] = true;
  for (std::int64_t p = first_page(slot); p <= last_page(slot); ++p)
    if (references_[static_cast<std::size_t>(p)]++ == 0) map.push_back(p);
  mapped_ += static_cast<std::int64_t>(map.size());
  return map;
}

std::vector<std::int64_t> PageMap::vacate(std::int64_t slot) {
  std::vector<std::int64_t> unmap;
  check_slot(slot);
  if (!occupied(slot)) return unmap;
  occupied_[static_cast<std::size_t>(slot)] = false;
  for (std::int64_t p = first_page(slot); p <= last_page(slot); ++p)
    if (--references_[static_cast<std::size_t>(p)] == 0) unmap.push_back(p);
  mapped_ -= static_cast<std::int64_t>(unmap.size());
  return unmap;
}

std::optional<PagePool::Page> PagePool::acquire() {
  if (!free_.empty()) {
    const std::int64_t id = free_.back();
    free_.pop_back();
    used_[static_cast<std::size_t>(id)] = true;
    return Page{id, false};
  }
  if (created_ >= limit_) return std::nullopt;
  used_.push_back(true);
  return Page{created_++, true};
}

void PagePool::release(std::int64_t id) {
  if (id < 0 || id >= created_ || !used_[static_cast<std::size_t>(id)])
    throw InvalidArgument("page pool", "page " + std::to_string(id), "is not in use", "release each page once, after unmapping it");
  used_[static_cast<std::size_t>(id)] = false;
  free_.push_back(id);
}

}  // namespace mosaic
