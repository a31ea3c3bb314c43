#pragma once
// The KV cache's fixed-size blocks (as vLLM pages it): each sequence holds a list of blocks of
// `block_tokens` positions, drawn from one pool whose size the device budget sets. Bookkeeping only;
// the backend holds the keys and values. Ids are handed out lowest first, so storage stays compact.
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace mosaic {

class KvBlockPool {
 public:
  // max_blocks nullopt: no limit (the pool grows as sequences need it).
  KvBlockPool(std::int64_t block_tokens, std::optional<std::int64_t> max_blocks);

  std::int64_t block_tokens() const { return block_tokens_; }
  std::optional<std::int64_t> capacity() const { return max_; }
  std::int64_t used() const { return used_; }
  std::int64_t peak() const { return peak_; }
  std::int64_t free() const;  // INT64_MAX when unlimited
  std::int64_t extent() const { return next_; }  // one past the highest id ever handed out
  // Blocks a sequence of `tokens` positions occupies.
  std::int64_t blocks_for(std::int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }

  std::optional<std::int32_t> allocate();  // nullopt when the pool is exhausted
  void release(std::vector<std::int32_t>& blocks);  // returns them and empties the list

 private:
  std::int64_t block_tokens_;
  std::optional<std::int64_t> max_;
  std::set<std::int32_t> free_;
  std::int32_t next_ = 0;
  std::int64_t used_ = 0, peak_ = 0;
};

}  // namespace mosaic
