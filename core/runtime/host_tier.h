#pragma once
// The host tier: every distinct tensor's bytes where its checkpoint holds them (memory-mapped, never
// copied), the most recently used kept resident in RAM within a host budget, the rest read from the
// file as they are needed: in chunks whose pages are given back once used, so that the process's
// resident memory stays within the budget whatever the family's size. A read of a tensor that is not
// resident is a read from disk (or from the kernel's page cache, which holds no part of this
// process's budget), timed and counted as such. A reader thread reads ahead what is asked for soon
// (read_ahead), off the critical path. Thread-safe.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

namespace mosaic {

// What one read cost: bytes handed to the reader, and of those the ones that came from disk, with the
// time spent waiting for them.
struct TierRead {
  std::uint64_t bytes = 0, disk_bytes = 0;
  double disk_seconds = 0;
  TierRead& operator+=(const TierRead& o) {
    bytes += o.bytes;
    disk_bytes += o.disk_bytes;
    disk_seconds += o.disk_seconds;
    return *this;
  }
};

struct TierStats {
  std::uint64_t resident_bytes = 0, resident_peak = 0;
  std::int64_t disk_reads = 0;  // on the critical path
  std::uint64_t disk_bytes = 0;
  double disk_seconds = 0;
  std::int64_t ahead_reads = 0;  // by the reader thread
  std::uint64_t ahead_bytes = 0;
  double ahead_seconds = 0;
  // The share of the time spent reading from disk that the reader thread took off the critical path.
  double hidden_share() const { return ahead_seconds + disk_seconds > 0 ? ahead_seconds / (ahead_seconds + disk_seconds) : 0.0; }
};

class HostTier {
 public:
  using Use = std::function<void(std::span<const std::byte> chunk, std::size_t offset)>;
  static constexpr std::size_t kChunk = std::size_t{8} << 20;  // what a read from disk holds at once

  // nullopt: no limit, every tensor resident from the start (as the checkpoints were already read).
  explicit HostTier(std::optional<std::uint64_t> budget_bytes);
  ~HostTier();
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // Registers a tensor's bytes (a span of a mapped file that outlives the tier); returns its index.
  std::size_t add(std::span<const std::byte> bytes);
  std::size_t size() const { return tensors_.size(); }
  std::span<const std::byte> bytes(std::size_t id) const { return tensors_[id].bytes; }

  // Hands the tensor's bytes to `use` in order. Resident, or admitted now: one span (a tensor read from
  // disk is admitted when the budget holds it, the least recently used giving way). Otherwise in chunks
  // of kChunk whose pages are given back after `use`.
  TierRead read(std::size_t id, const Use& use);
  // Asks the reader thread to make these resident soon (those already resident are only refreshed).
  void read_ahead(std::span<const std::size_t> ids);
  // Waits until the reader thread has nothing queued (tests, measurements).
  void settle();

  std::optional<std::uint64_t> budget() const { return budget_; }
  TierStats stats() const;

  // Gives the pages of `bytes` back to the kernel (the interior whole pages; the file keeps the data):
  // for readers outside the tier (hashing, comparing, analysis) that must not grow the process.
  static void release(std::span<const std::byte> bytes);

 private:
  struct Entry {
    std::span<const std::byte> bytes;
    bool resident = false;
    std::list<std::size_t>::iterator lru;  // valid while resident
  };
  // Under m_: makes room for `bytes` by dropping the least recently used; false when they cannot fit.
  bool make_room(std::uint64_t bytes);
  void admit(std::size_t id);  // under m_
  static double touch(std::span<const std::byte> bytes);  // faults the pages in; seconds
  void reader();

  std::optional<std::uint64_t> budget_;
  std::vector<Entry> tensors_;
  mutable std::mutex m_;
  std::list<std::size_t> lru_;  // most recent at the front
  TierStats stats_;
  std::condition_variable cv_, idle_;
  std::deque<std::size_t> queue_;
  bool busy_ = false, stopping_ = false;
  std::thread reader_;
};

}  // namespace mosaic
