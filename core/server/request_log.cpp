#include "server/request_log.h"

#include <iostream>

#include "common/error.h"
#include "store/recorder.h"

namespace mosaic::server {

RequestLog::RequestLog(Recorder* recorder, std::int64_t run_id, Observer observer)
    : recorder_(recorder), run_id_(run_id), observer_(std::move(observer)), thread_([this] { run(); }) {}

RequestLog::~RequestLog() {
  {
    std::lock_guard lock(m_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RequestLog::add(RequestRecord record) {
  {
    std::lock_guard lock(m_);
    record.index = added_++;
    queue_.push_back(std::move(record));
  }
  cv_.notify_all();
}

void RequestLog::flush() {
  std::unique_lock lock(m_);
  const std::int64_t upto = added_;
  cv_.wait(lock, [&] { return handled_ >= upto; });
}

std::int64_t RequestLog::recorded() const {
  std::lock_guard lock(m_);
  return recorded_;
}

void RequestLog::run() {
  std::unique_lock lock(m_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
    if (queue_.empty()) return;  // closing, and everything written
    RequestRecord r = std::move(queue_.front());
    queue_.pop_front();
    const bool record = recorder_ && recording_;
    lock.unlock();
    bool written = false;
    if (record) {
      try {
        recorder_->record(run_id_, r);
        written = true;
      } catch (const Error& e) {  // a full disk: serving goes on, recording stops, and says so once
        std::cerr << "serve: stopped recording: " << e.what() << "\n";
        lock.lock();
        recording_ = false;
        lock.unlock();
      }
    }
    if (observer_) try {
        observer_(r);
      } catch (const std::exception& e) {  // an observer's failure is its own; the log goes on
        std::cerr << "serve: request observer failed: " << e.what() << "\n";
      }
    lock.lock();
    ++handled_;
    if (written) ++recorded_;
    cv_.notify_all();
  }
}

}  // namespace mosaic::server
