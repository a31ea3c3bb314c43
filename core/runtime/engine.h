#pragma once
// Serves requests for any variant on one thread of its own: submit() from any thread, tokens
// streamed through a callback as they are sampled, and per request the timings and counters the
// QoS experiments need. One request runs at a time (batching comes later), in submission order.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/runtime.h"

namespace mosaic {

struct ServeRequest {
  std::string target;           // variant name
  GenerationRequest generation;
};

struct RequestStats {
  double queue_wait_seconds = 0;  // submit → start
  double ttft_seconds = 0;        // submit → first token
  double tpot_seconds = 0;        // mean time per output token after the first
  double total_seconds = 0;       // submit → finished
  std::int64_t prompt_tokens = 0, generated_tokens = 0;
  RuntimeCounters counters;      // hits, misses, loads and swaps (time and bytes) of this request

  double swap_seconds() const { return counters.swap_seconds; }
};

struct RequestResult {
  std::vector<std::int64_t> tokens;
  Finish finish = Finish::Length;
  RequestStats stats;
  std::string error;  // Finish::Failed only
};

class RequestHandle {
 public:
  std::uint64_t id() const { return id_; }
  const std::string& target() const { return target_; }
  // Queued: it never runs. Running: it stops after the token being computed. Finished: no effect.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  bool finished() const;
  const RequestResult& wait() const;  // blocks until finished

 private:
  friend class Engine;
  RequestHandle(std::uint64_t id, std::string target) : id_(id), target_(std::move(target)) {}
  void finish(RequestResult result);

  std::uint64_t id_;
  std::string target_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  RequestResult result_;
};

// Called on the engine thread with each token as it is sampled, and the request's counters so far
// (hits and misses per layer, loads, swaps), so a viewer can show what each token cost.
using StreamCallback = std::function<void(const RequestHandle& request, std::int64_t token, const RuntimeCounters& so_far)>;

class Engine {
 public:
  explicit Engine(Runtime& runtime);
  ~Engine();  // cancels what is queued, lets the running request stop, joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Throws InvalidArgument for an unknown target, an empty prompt or an id outside
  // the vocabulary, so a bad request fails at once instead of in the queue.
  std::shared_ptr<RequestHandle> submit(ServeRequest request, StreamCallback on_token = {});
  std::size_t queued() const;

 private:
  struct Job;
  void run();
  void serve(Job& job);

  Runtime& runtime_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  std::uint64_t next_id_ = 1;
  std::thread worker_;
};

}  // namespace mosaic
