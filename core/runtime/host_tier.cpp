#include "runtime/host_tier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "common/stopwatch.h"
#include "model/mapped_file.h"

namespace mosaic {
namespace {

std::uintptr_t page_size() {
  static const auto size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

HostTier::HostTier(std::optional<std::uint64_t> budget_bytes) : budget_(budget_bytes) {}

HostTier::~HostTier() {
  {
    std::lock_guard lock(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (reader_.joinable()) reader_.join();
}

std::size_t HostTier::add(std::span<const std::byte> bytes) {
  std::lock_guard lock(m_);
  tensors_.push_back({bytes, !budget_, {}});
  if (!budget_) {
    stats_.resident_bytes += bytes.size();
    stats_.resident_peak = stats_.resident_bytes;
  }
  return tensors_.size() - 1;
}

void HostTier::release(std::span<const std::byte> bytes) { release_pages(bytes); }

double HostTier::touch(std::span<const std::byte> bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  if (bytes.empty()) return 0;
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data()) / page_size() * page_size();
  ::madvise(reinterpret_cast<void*>(begin), reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size() - begin, MADV_WILLNEED);
  // One byte a page, in order: the kernel reads ahead of the faults.
  volatile std::byte sink{};
  for (std::size_t at = 0; at < bytes.size(); at += page_size()) sink = bytes[at];
  sink = bytes.back();
  (void)sink;
  return seconds_since(t0);
}

bool HostTier::make_room(std::uint64_t bytes) {
  if (!budget_) return true;
  if (bytes > *budget_) return false;
  while (stats_.resident_bytes + bytes > *budget_ && !lru_.empty()) {
    Entry& victim = tensors_[lru_.back()];
    lru_.pop_back();
    victim.resident = false;
    stats_.resident_bytes -= victim.bytes.size();
    release(victim.bytes);
  }
  return true;
}

void HostTier::admit(std::size_t id) {
  Entry& e = tensors_[id];
  e.resident = true;
  lru_.push_front(id);
  e.lru = lru_.begin();
  stats_.resident_bytes += e.bytes.size();
  stats_.resident_peak = std::max(stats_.resident_peak, stats_.resident_bytes);
}

TierRead HostTier::read(std::size_t id, const Use& use) {
  const std::span<const std::byte> bytes = tensors_[id].bytes;
  enum class How { Resident, Admitted, Streamed } how = How::Streamed;
  {
    std::lock_guard lock(m_);
    Entry& e = tensors_[id];
    if (e.resident) {
      if (budget_) lru_.splice(lru_.begin(), lru_, e.lru);  // the most recent
      how = How::Resident;
    } else if (make_room(bytes.size())) {
      admit(id);
      how = How::Admitted;
    }
  }
  TierRead r{bytes.size(), 0, 0};
  if (how == How::Resident) {
    use(bytes, 0);
    return r;
  }
  r.disk_bytes = bytes.size();
  if (how == How::Admitted) {
    r.disk_seconds = touch(bytes);
    use(bytes, 0);
  } else {  // larger than the whole budget: streamed through, each chunk given back
    for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
      const auto chunk = bytes.subspan(at, std::min(kChunk, bytes.size() - at));
      r.disk_seconds += touch(chunk);
      use(chunk, at);
      release(chunk);
    }
  }
  std::lock_guard lock(m_);
  ++stats_.disk_reads;
  stats_.disk_bytes += r.disk_bytes;
  stats_.disk_seconds += r.disk_seconds;
  return r;
}

void HostTier::read_ahead(std::span<const std::size_t> ids) {
  if (!budget_ || ids.empty()) return;  // without a budget everything is resident
  {
    std::lock_guard lock(m_);
    for (std::size_t id : ids) {
      Entry& e = tensors_[id];
      if (e.resident) lru_.splice(lru_.begin(), lru_, e.lru);  // wanted soon: the last to give way
      else if (std::find(queue_.begin(), queue_.end(), id) == queue_.end()) queue_.push_back(id);
    }
    if (queue_.empty()) return;
    if (!reader_.joinable()) reader_ = std::thread([this] { reader(); });
  }
  cv_.notify_one();
}

void HostTier::reader() {
  std::unique_lock lock(m_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const std::size_t id = queue_.front();
    queue_.pop_front();
    Entry& e = tensors_[id];
    if (e.resident || !make_room(e.bytes.size())) {
      if (queue_.empty()) idle_.notify_all();
      continue;
    }
    admit(id);
    busy_ = true;
    lock.unlock();
    const double seconds = touch(e.bytes);
    lock.lock();
    busy_ = false;
    ++stats_.ahead_reads;
    stats_.ahead_bytes += e.bytes.size();
    stats_.ahead_seconds += seconds;
    if (queue_.empty()) idle_.notify_all();
  }
}

void HostTier::settle() {
  std::unique_lock lock(m_);
  idle_.wait(lock, [&] { return (queue_.empty() && !busy_) || !reader_.joinable(); });
}

TierStats HostTier::stats() const {
  std::lock_guard lock(m_);
  return stats_;
}

}  // namespace mosaic
