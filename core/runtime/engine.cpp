#include "runtime/engine.h"

#include <chrono>

#include "common/error.h"

namespace mosaic {
namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

struct Engine::Job {
  std::shared_ptr<RequestHandle> handle;
  ServeRequest request;
  int target = -1;
  StreamCallback on_token;
  Clock::time_point submitted;
};

bool RequestHandle::finished() const {
  std::lock_guard lock(m_);
  return done_;
}

const RequestResult& RequestHandle::wait() const {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

void RequestHandle::finish(RequestResult result) {
  {
    std::lock_guard lock(m_);
    result_ = std::move(result);
    done_ = true;
  }
  cv_.notify_all();
}

Engine::Engine(Runtime& runtime) : runtime_(runtime), worker_([this] { run(); }) {}

Engine::~Engine() {
  {
    std::lock_guard lock(m_);
    stopping_ = true;
    for (auto& job : queue_) job->handle->cancel();
  }
  cv_.notify_all();
  worker_.join();
}

std::shared_ptr<RequestHandle> Engine::submit(ServeRequest request, StreamCallback on_token) {
  const HostStore& store = runtime_.store();
  const int target = store.index(request.target);
  if (target < 0) throw InvalidArgument("request", "target '" + request.target + "'", "is not a variant being served");
  const auto& prompt = request.generation.prompt;
  if (prompt.empty()) throw InvalidArgument("request", "prompt", "is empty", "give at least one token id");
  for (std::int64_t id : prompt)
    if (id < 0 || id >= store.spec().vocab_size)
      throw InvalidArgument("request", "token id " + std::to_string(id),
                            "is outside the vocabulary [0, " + std::to_string(store.spec().vocab_size) + ")");
  if (request.generation.max_new_tokens < 0) throw InvalidArgument("request", "max_new_tokens", "must not be negative");
  Sampler check(request.generation.sampling);  // throws for sampling parameters out of range

  auto job = std::make_unique<Job>();
  job->target = target;
  job->on_token = std::move(on_token);
  job->submitted = Clock::now();
  std::shared_ptr<RequestHandle> handle;
  {
    std::lock_guard lock(m_);
    handle.reset(new RequestHandle(next_id_++, request.target));
    job->handle = handle;
    job->request = std::move(request);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return handle;
}

std::size_t Engine::queued() const {
  std::lock_guard lock(m_);
  return queue_.size();
}

void Engine::run() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to finish
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    serve(*job);
  }
}

void Engine::serve(Job& job) {
  RequestHandle& h = *job.handle;
  RequestResult result;
  RequestStats& st = result.stats;
  const Clock::time_point start = Clock::now();
  st.queue_wait_seconds = seconds(job.submitted, start);
  st.prompt_tokens = static_cast<std::int64_t>(job.request.generation.prompt.size());
  st.counters = runtime_.new_counters();
  if (h.cancelled()) {
    result.finish = Finish::Cancelled;
    st.total_seconds = st.queue_wait_seconds;
    h.finish(std::move(result));
    return;
  }
  Clock::time_point first{}, last{};
  try {
    runtime_.reconfigure(job.target, st.counters);  // before the first token, so TTFT includes it
    const GenerationResult g = runtime_.generate(
        job.target, job.request.generation, st.counters, [&](std::int64_t token, std::int64_t index) {
          last = Clock::now();
          if (index == 0) first = last;
          if (job.on_token) job.on_token(h, token, st.counters);
          return !h.cancelled();
        });
    result.tokens = g.tokens;
    result.finish = g.finish;
  } catch (const std::exception& e) {
    result.finish = Finish::Failed;
    result.error = e.what();
  }
  const Clock::time_point end = Clock::now();
  st.generated_tokens = static_cast<std::int64_t>(result.tokens.size());
  if (st.generated_tokens > 0) st.ttft_seconds = seconds(job.submitted, first);
  if (st.generated_tokens > 1) st.tpot_seconds = seconds(first, last) / static_cast<double>(st.generated_tokens - 1);
  st.total_seconds = seconds(job.submitted, end);
  h.finish(std::move(result));
}

}  // namespace mosaic
