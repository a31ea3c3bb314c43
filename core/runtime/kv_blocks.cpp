#include "runtime/kv_blocks.h"

#include <limits>

#include "common/error.h"

namespace mosaic {

KvBlockPool::KvBlockPool(std::int64_t block_tokens, std::optional<std::int64_t> max_blocks)
    : block_tokens_(block_tokens), max_(max_blocks) {
  if (block_tokens < 1) throw InvalidArgument("KV cache", "block tokens", "must be at least 1");
  if (max_ && *max_ < 0) throw InvalidArgument("KV cache", "blocks", "must not be negative");
}

std::int64_t KvBlockPool::free() const {
  return max_ ? *max_ - used_ : std::numeric_limits<std::int64_t>::max();
}

std::optional<std::int32_t> KvBlockPool::allocate() {
  std::int32_t id;
  if (!free_.empty()) {
    id = *free_.begin();
    free_.erase(free_.begin());
  } else {
    if (max_ && next_ >= *max_) return std::nullopt;
    id = next_++;
  }
  peak_ = std::max(peak_, ++used_);
  return id;
}

void KvBlockPool::release(std::vector<std::int32_t>& blocks) {
  for (std::int32_t b : blocks) free_.insert(b);
  used_ -= static_cast<std::int64_t>(blocks.size());
  blocks.clear();
}

}  // namespace mosaic
