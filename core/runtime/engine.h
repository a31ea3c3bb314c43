#pragma once
// The one way into the runtime: chat, the command line, evaluation, the QoS runner and the workbench
// all submit requests here. The engine serves them on a thread of its own with iteration-level
// continuous batching — each step runs the prefill chunks of newly admitted sequences together with
// one decode token of every running one, across variants and adapters — and streams each token as
// it is sampled. Requests may arrive in the future on the engine's clock (a workload replayed on a
// virtual clock); the runtime, the scheduler options and the clock can be changed between steps.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/clock.h"
#include "runtime/generation.h"
#include "runtime/runtime.h"
#include "runtime/scheduler.h"

namespace mosaic {

struct ServeRequest {
  std::string target;            // a variant's or adapter's name (or a name the runtime serves as one)
  GenerationRequest generation;  // prompt, tokens to generate, sampling, stop ids
  // Logits of every prompt position (for `logits` and perplexity): generation must ask for 0 tokens.
  bool prompt_logits = false;
  std::optional<double> arrival;  // on the engine's clock; default: when submitted
};

struct RequestResult {
  std::vector<std::int64_t> tokens;
  Finish finish = Finish::Length;
  RequestStats stats;
  Logits logits;      // prompt_logits only: [prompt length, vocab]
  std::string error;  // Finish::Failed only
};

class RequestHandle;
// Called on the engine thread with each token as it is sampled, and the request's counters so far.
using StreamCallback = std::function<void(const RequestHandle& request, std::int64_t token, const RuntimeCounters& so_far)>;
// Called on the engine thread once, when the request ends (whatever the outcome).
using FinishCallback = std::function<void(const RequestHandle& request, const RequestResult& result)>;

// Called on the engine thread after each step that ran some of the request's tokens, before its
// token (if any) is streamed: where each of those tokens' router choices went, layer by layer;
// `position` is the first of those tokens' position in the sequence (RoutedExpert::token counts from it).
using RoutesCallback = std::function<void(const RequestHandle& request, std::int64_t position, const std::vector<RoutedExpert>& routes)>;

struct RequestCallbacks {
  StreamCallback on_token;
  FinishCallback on_finish;
  RoutesCallback on_routes;  // set: the request's steps record their routes (a little slower)
};

class RequestHandle {
 public:
  ~RequestHandle();
  std::uint64_t id() const { return id_; }
  const std::string& target() const { return target_; }
  // Waiting: it never runs. Running: it stops after the step in flight and its KV blocks are freed.
  // Finished: no effect. Callable from any thread.
  void cancel();
  bool cancelled() const { return cancelled_; }
  bool finished() const;
  const RequestResult& wait() const;  // blocks until finished
  bool wait_for(std::chrono::milliseconds timeout) const;  // true when finished within it

 private:
  friend class Engine;
  struct Wake;
  RequestHandle(std::uint64_t id, std::string target, std::weak_ptr<Wake> wake);
  void finish(RequestResult result);

  std::uint64_t id_;
  std::string target_;
  std::weak_ptr<Wake> wake_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  RequestResult result_;
};

struct EngineOptions {
  SchedulerOptions scheduler;
  std::shared_ptr<Clock> clock;  // null: a real clock
};

struct EngineStats {
  std::int64_t steps = 0, tokens = 0;
  std::int64_t largest_step_tokens = 0, largest_step_sequences = 0;
  std::int64_t preemptions = 0, swaps = 0;
  std::int64_t parks = 0;        // running sequences set aside with their KV blocks for another set
  std::int64_t swaps_ahead = 0;  // of the swaps, those filled while earlier steps ran (SchedulerOptions::swap_ahead)
  double swap_seconds = 0;       // what steps waited for swaps, ahead or not
};

class Engine {
 public:
  explicit Engine(std::shared_ptr<Runtime> runtime, EngineOptions options = {});
  ~Engine();  // cancels everything not finished and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Throws InvalidArgument for a target not served, an empty prompt, an id outside the
  // vocabulary or bad sampling, and BudgetError for a request whose KV cache could never fit — so a
  // bad request fails at once instead of in the queue.
  std::shared_ptr<RequestHandle> submit(ServeRequest request, RequestCallbacks callbacks = {});
  // All at once, atomically: the engine sees every one before its next step (a workload on a virtual
  // clock must not let the clock run past arrivals not yet submitted). All are checked first.
  std::vector<std::shared_ptr<RequestHandle>> submit_all(std::vector<ServeRequest> requests,
                                                         const std::vector<RequestCallbacks>& callbacks = {});

  double now() const;
  std::shared_ptr<Runtime> runtime() const;
  std::shared_ptr<Clock> clock() const;
  EngineStats stats() const;
  SchedulerOptions scheduler_options() const;
  std::size_t queued() const;  // submitted and not yet running (arrived or not)

  // Take effect before the next step. Running sequences are sent back to wait and recomputed under
  // the new runtime; requests for targets it does not serve fail.
  void set_runtime(std::shared_ptr<Runtime> runtime);
  // A family change served in place (Runtime::in_place gave `config`), before the next step: running
  // requests keep their KV cache and resident sets and go on; every request is renamed to the next
  // store's target of its name (one whose target is gone fails). The future holds what the change
  // kept and queued, or what it threw (the runtime then serves as it did).
  std::future<RebaseResult> rebase(std::shared_ptr<const HostStore> next, RuntimeConfig config);
  void set_scheduler(SchedulerOptions options);
  // Requests not yet finished keep the times they have; give a new clock between workloads.
  void set_clock(std::shared_ptr<Clock> clock);

 private:
  struct Job;
  void run();
  std::unique_ptr<Scheduler> make_scheduler() const;
  bool step(double now);  // false when there was nothing to run
  void apply_changes(std::unique_lock<std::mutex>& lock);
  void rebase_now(std::unique_lock<std::mutex>& lock);  // next_rebase_, with the lock held
  void finish(Job& job, Finish finish, std::string error = {});
  void forget_finished();  // drops finished jobs from jobs_, owner_ and pending_ (jobs_ holds them until then, done)
  std::unique_ptr<Job> make_job(ServeRequest request, RequestCallbacks callbacks);

  // The engine's lock and wake-up, shared with its handles (a cancel wakes the engine) so that a
  // handle outliving the engine stays safe. Everything below up to the engine thread's own is
  // guarded by its mutex.
  std::shared_ptr<RequestHandle::Wake> wake_;
  std::shared_ptr<Runtime> runtime_, next_runtime_;
  struct Rebase {
    std::shared_ptr<const HostStore> store;
    RuntimeConfig config;
    std::promise<RebaseResult> done;
  };
  std::optional<Rebase> next_rebase_;
  std::optional<SchedulerOptions> next_scheduler_;
  std::shared_ptr<Clock> clock_;
  std::deque<std::unique_ptr<Job>> incoming_;
  EngineStats stats_;
  std::size_t queued_ = 0;
  std::shared_ptr<Clock> next_clock_;
  bool stopping_ = false;
  std::uint64_t next_id_ = 1;
  // The engine thread's own.
  SchedulerOptions scheduler_options_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Job>> jobs_;  // not yet finished, in submission order
  std::unordered_map<const SequenceState*, Job*> owner_;  // each of jobs_ by its sequence
  std::multimap<double, Job*> pending_;                    // jobs_ not yet arrived, by arrival (submission order within)
  std::uint64_t cancels_seen_ = 0;                         // Wake::cancels when jobs_ were last looked over for them
  std::size_t finished_ = 0;                               // of jobs_, those finished since they were last forgotten
  std::thread worker_;
};

}  // namespace mosaic
