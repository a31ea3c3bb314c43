#include "runtime/cuda/pinned_mirror.h"

#include <cstring>
#include <map>
#include <mutex>

namespace mosaic::cuda {

PinnedMirror::PinnedMirror(const HostStore& store) {
  std::size_t total = 0;
  for (int i = 0; i < store.distinct_tensors(); ++i) {
    offset_.push_back(total);
    total += (store.tensor(i).bytes.size() + 255) / 256 * 256;  // aligned for 16-byte vector reads
  }
  for (int i = 0; i < store.deltas(); ++i) {
    delta_offset_.push_back(total);
    blocks_.push_back(cuda::delta_block(store.delta(i)));
    total += blocks_.back().bytes;
  }
  arena_.resize(total);
  for (int i = 0; i < store.distinct_tensors(); ++i) {
    const auto& b = store.tensor(i).bytes;
    std::memcpy(arena_.get<std::byte>() + offset_[static_cast<std::size_t>(i)], b.data(), b.size());
  }
  for (int i = 0; i < store.deltas(); ++i)
    write_delta_block(store.delta(i), blocks_[static_cast<std::size_t>(i)], arena_.get<std::byte>() + delta_offset_[static_cast<std::size_t>(i)]);
}

std::shared_ptr<const PinnedMirror> PinnedMirror::of(const HostStore& store) {
  static std::mutex mutex;
  static std::map<const HostStore*, std::weak_ptr<const PinnedMirror>> mirrors;
  const std::lock_guard lock(mutex);
  // A store outlives every runtime (and backend) built on it, so a live entry is this store's.
  if (auto m = mirrors[&store].lock()) return m;
  auto m = std::make_shared<const PinnedMirror>(store);
  mirrors[&store] = m;
  return m;
}

}  // namespace mosaic::cuda
