#include "serving/runner.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "common/error.h"

namespace mosaic {
namespace {

// Collects records, reports them one at a time, and stops the run when asked to.
class Collector {
 public:
  Collector(std::size_t total, const RunOptions& o) : total_(total), options_(o), records_(total) {}

  void add(RequestRecord rec) {
    std::lock_guard lock(m_);
    if (stopped_ && rec.outcome == Finish::Cancelled) return;  // cancelled by the stop: never served
    if (options_.on_finished) options_.on_finished(rec);
    const auto i = static_cast<std::size_t>(rec.index);
    records_[i] = std::move(rec);
    ++done_;
    if (options_.progress && !options_.progress(done_, total_)) stop();
  }
  void watch(std::vector<std::shared_ptr<RequestHandle>> handles) {
    std::lock_guard lock(m_);
    for (auto& h : handles) handles_.push_back(std::move(h));
    if (stopped_) stop();
  }
  bool stopped() const { return stopped_; }
  std::vector<RequestRecord> take() {
    std::vector<RequestRecord> out;
    for (auto& r : records_)
      if (r) out.push_back(std::move(*r));
    return out;
  }

 private:
  void stop() {  // under m_
    stopped_ = true;
    for (auto& h : handles_) h->cancel();
  }
  std::size_t total_;
  const RunOptions& options_;
  std::mutex m_;
  std::vector<std::optional<RequestRecord>> records_;
  std::vector<std::shared_ptr<RequestHandle>> handles_;
  std::size_t done_ = 0;
  std::atomic<bool> stopped_{false};
};

// Submits the partition's requests, arrivals offset from the clock's present; returns the handles.
std::vector<std::shared_ptr<RequestHandle>> submit(Engine& engine, const Clock& clock, std::size_t lane,
                                                   const std::vector<WorkloadRequest>& w,
                                                   const std::vector<std::size_t>& indices, Collector& c, bool trace) {
  const double t0 = clock.now();
  std::vector<ServeRequest> requests;
  std::vector<RequestCallbacks> callbacks;
  for (std::size_t i : indices) {
    const WorkloadRequest& r = w[i];
    requests.push_back({r.target, {.prompt = r.prompt, .max_new_tokens = r.max_new_tokens}, false, t0 + r.arrival});
    // The routes gather on the engine thread, step by step, until the request finishes there.
    auto routes = trace ? std::make_shared<std::vector<RoutedExpert>>() : nullptr;
    RoutesCallback on_routes;
    if (trace)
      on_routes = [routes](const RequestHandle&, std::int64_t position, const std::vector<RoutedExpert>& step) {
        for (RoutedExpert r : step) {
          r.token = static_cast<std::int32_t>(position + r.token);
          routes->push_back(r);
        }
      };
    callbacks.push_back({{},
                         [&c, i, lane, t0, routes, target = r.target](const RequestHandle&, const RequestResult& result) {
                           RequestRecord rec{static_cast<std::int64_t>(i), target, lane, result.finish, result.error, result.stats, {}};
                           for (double* t : {&rec.stats.arrival, &rec.stats.start, &rec.stats.first_token, &rec.stats.finish}) *t -= t0;
                           if (routes) rec.routes = std::move(*routes);
                           c.add(std::move(rec));
                         },
                         std::move(on_routes)});
  }
  auto handles = engine.submit_all(std::move(requests), callbacks);
  c.watch(handles);
  return handles;
}

// The shared engine set up for the run, and put back as it was afterwards.
class Borrowed {
 public:
  Borrowed(Engine& e, const Deployment::Partition& p, const SchedulerOptions& s, std::shared_ptr<Clock> clock)
      : e_(e), runtime_(e.runtime()), scheduler_(e.scheduler_options()), clock_(e.clock()) {
    e.set_runtime(p.runtime);
    e.set_scheduler(s);
    e.set_clock(std::move(clock));
  }
  ~Borrowed() {
    e_.set_runtime(runtime_);
    e_.set_scheduler(scheduler_);
    e_.set_clock(clock_);
  }

 private:
  Engine& e_;
  std::shared_ptr<Runtime> runtime_;
  SchedulerOptions scheduler_;
  std::shared_ptr<Clock> clock_;
};

}  // namespace

std::vector<RequestRecord> run_workload(const Deployment& d, const std::vector<WorkloadRequest>& w, const RunOptions& o) {
  // Simulated: a virtual clock that the simulated device's priced time moves on (runtime/sim_backend.h).
  if (o.clock == RunClock::Simulated && !d.partitions().front().runtime->priced())
    throw InvalidArgument("run", "clock 'simulated'", "needs a deployment on a simulated device", "build it with Deployment's simulated constructor");
  std::vector<std::vector<std::size_t>> by_lane(d.partitions().size());
  for (std::size_t i = 0; i < w.size(); ++i) by_lane[d.partition_of(w[i].target)].push_back(i);
  Collector c(w.size(), o);
  auto make_clock = [&] { return o.clock == RunClock::Real ? make_real_clock() : make_virtual_clock(); };
  const SchedulerOptions& scheduler = d.config().scheduler;

  if (o.engine && d.partitions().size() == 1) {
    const auto clock = make_clock();
    Borrowed borrowed(*o.engine, d.partitions().front(), scheduler, clock);
    for (const auto& h : submit(*o.engine, *clock, 0, w, by_lane[0], c, o.trace_routes)) h->wait();
    return c.take();
  }
  if (o.clock != RunClock::Real) {
    for (std::size_t lane = 0; lane < by_lane.size() && !c.stopped(); ++lane) {
      const auto clock = make_clock();
      Engine engine(d.partitions()[lane].runtime, {scheduler, clock});
      for (const auto& h : submit(engine, *clock, lane, w, by_lane[lane], c, o.trace_routes)) h->wait();
    }
    return c.take();
  }
  // Real: every partition's engine at once, all counting from one start.
  const auto clock = make_clock();
  std::vector<std::unique_ptr<Engine>> engines;
  for (const auto& p : d.partitions()) engines.push_back(std::make_unique<Engine>(p.runtime, EngineOptions{scheduler, clock}));
  std::vector<std::shared_ptr<RequestHandle>> all;
  for (std::size_t lane = 0; lane < engines.size(); ++lane)
    for (auto& h : submit(*engines[lane], *clock, lane, w, by_lane[lane], c, o.trace_routes)) all.push_back(std::move(h));
  for (const auto& h : all) h->wait();
  return c.take();
}

}  // namespace mosaic
