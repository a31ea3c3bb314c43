#include "serving/runner.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace mosaic {
namespace {

using Clock = std::chrono::steady_clock;

RequestRecord record_of(std::size_t index, const WorkloadRequest& r, std::size_t lane, double start,
                        const ServedRequest& served) {
  RequestRecord rec;
  rec.index = static_cast<std::int64_t>(index);
  rec.target = r.target;
  rec.lane = lane;
  rec.arrival = r.arrival;
  rec.start = start;
  rec.finish = start + served.service_seconds;
  rec.first_token = served.tokens.empty() ? rec.finish : start + served.first_token_seconds;
  rec.prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
  rec.output_tokens = static_cast<std::int64_t>(served.tokens.size());
  rec.outcome = served.finish;
  rec.error = served.error;
  rec.counters = served.counters;
  return rec;
}

// Collects records, reports them one at a time, and tells whether to go on.
class Collector {
 public:
  Collector(std::size_t total, const RunOptions& o) : total_(total), options_(o), records_(total) {}
  bool add(RequestRecord rec) {
    std::lock_guard lock(m_);
    if (options_.on_finished) options_.on_finished(rec);
    records_[static_cast<std::size_t>(rec.index)] = std::move(rec);
    ++done_;
    if (options_.progress && !options_.progress(done_, total_)) stopped_ = true;
    return !stopped_;
  }
  bool stopped() const { return stopped_; }
  std::vector<RequestRecord> take() {
    std::vector<RequestRecord> out;
    for (auto& r : records_)
      if (r) out.push_back(std::move(*r));
    return out;
  }

 private:
  std::size_t total_;
  const RunOptions& options_;
  std::mutex m_;
  std::vector<std::optional<RequestRecord>> records_;
  std::size_t done_ = 0;
  std::atomic<bool> stopped_{false};
};

std::vector<RequestRecord> run_virtual(StrategyServer& server, const std::vector<WorkloadRequest>& w, const RunOptions& o) {
  Collector c(w.size(), o);
  std::vector<double> free_at(server.lanes(), 0.0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::size_t lane = server.lane_of(w[i].target);
    const ServedRequest served = server.serve(w[i]);
    const double start = std::max(w[i].arrival, free_at[lane]);
    RequestRecord rec = record_of(i, w[i], lane, start, served);
    free_at[lane] = rec.finish;
    if (!c.add(std::move(rec))) break;
  }
  return c.take();
}

std::vector<RequestRecord> run_real(StrategyServer& server, const std::vector<WorkloadRequest>& w, const RunOptions& o) {
  Collector c(w.size(), o);
  struct Queue {
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::size_t> items;
    bool closed = false;
  };
  std::vector<Queue> queues(server.lanes());
  const Clock::time_point t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<std::thread> workers;
  for (std::size_t lane = 0; lane < queues.size(); ++lane)
    workers.emplace_back([&, lane] {
      Queue& q = queues[lane];
      for (;;) {
        std::size_t i;
        {
          std::unique_lock lock(q.m);
          q.cv.wait(lock, [&] { return q.closed || !q.items.empty(); });
          if (q.items.empty() || c.stopped()) return;
          i = q.items.front();
          q.items.pop_front();
        }
        const double start = now();
        const ServedRequest served = server.serve(w[i]);
        c.add(record_of(i, w[i], lane, start, served));
      }
    });
  for (std::size_t i = 0; i < w.size() && !c.stopped(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(w[i].arrival)));
    Queue& q = queues[server.lane_of(w[i].target)];
    {
      std::lock_guard lock(q.m);
      q.items.push_back(i);
    }
    q.cv.notify_one();
  }
  for (Queue& q : queues) {
    {
      std::lock_guard lock(q.m);
      q.closed = true;
    }
    q.cv.notify_all();
  }
  for (auto& t : workers) t.join();
  return c.take();
}

}  // namespace

std::vector<RequestRecord> run_workload(StrategyServer& server, const std::vector<WorkloadRequest>& workload,
                                        const RunOptions& options) {
  for (const WorkloadRequest& r : workload) server.lane_of(r.target);  // refuse unknown targets before starting
  return options.clock == RunClock::Virtual ? run_virtual(server, workload, options) : run_real(server, workload, options);
}

}  // namespace mosaic
