#pragma once
// The requests a server finished, written to the SQLite record and shown to an observer on a thread
// of the log's own, so that neither a disk write nor an observer ever stalls the engine's step.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "serving/metrics.h"

namespace mosaic {
class Recorder;
}

namespace mosaic::server {

class RequestLog {
 public:
  using Observer = std::function<void(const RequestRecord&)>;
  // `recorder` may be null (nothing written); `run_id` is the run the requests are recorded under.
  RequestLog(Recorder* recorder, std::int64_t run_id, Observer observer = {});
  ~RequestLog();  // writes what is queued, then joins
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // Any thread; returns at once. The record's index is assigned here, in the order of the calls.
  void add(RequestRecord record);
  // Returns once everything added before the call is written and observed.
  void flush();
  std::int64_t recorded() const;  // written to the record so far

 private:
  void run();
  Recorder* recorder_;
  std::int64_t run_id_;
  Observer observer_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<RequestRecord> queue_;
  std::int64_t added_ = 0, handled_ = 0, recorded_ = 0;
  bool recording_ = true, closing_ = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace mosaic::server
