#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "common/edit_distance.h"
#include "common/error.h"
#include "runtime/request_checks.h"
#include "runtime/step_draws.h"
#include "runtime/threads.h"

namespace mosaic {

struct RequestHandle::Wake {
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t events = 0;   // bumped (under m) by anything the engine must look at
  std::uint64_t cancels = 0;  // bumped (under m) by each cancel: the engine looks for them only then
};

struct Engine::Job {
  std::shared_ptr<RequestHandle> handle;
  ServeRequest request;
  RequestCallbacks callbacks;
  int target = -1;
  std::vector<std::int64_t> tokens;  // the prompt, then what was generated
  std::unique_ptr<Sampler> sampler;
  SequenceState seq;
  RequestResult result;
  bool arrived = false, admitted = false, done = false;
};

RequestHandle::RequestHandle(std::uint64_t id, std::string target, std::weak_ptr<Wake> wake)
    : id_(id), target_(std::move(target)), wake_(std::move(wake)) {}
RequestHandle::~RequestHandle() = default;

void RequestHandle::cancel() {
  cancelled_ = true;
  if (const auto w = wake_.lock()) {
    std::lock_guard lock(w->m);
    ++w->events;
    ++w->cancels;
    w->cv.notify_all();
  }
}

bool RequestHandle::finished() const {
  std::lock_guard lock(m_);
  return done_;
}

const RequestResult& RequestHandle::wait() const {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

bool RequestHandle::wait_for(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(m_);
  return cv_.wait_for(lock, timeout, [&] { return done_; });
}

void RequestHandle::finish(RequestResult result) {
  {
    std::lock_guard lock(m_);
    result_ = std::move(result);
    done_ = true;
  }
  cv_.notify_all();
}

Engine::Engine(std::shared_ptr<Runtime> runtime, EngineOptions options)
    : wake_(std::make_shared<RequestHandle::Wake>()),
      runtime_(std::move(runtime)),
      clock_(options.clock ? options.clock : make_real_clock()),
      scheduler_options_(options.scheduler) {
  if (!runtime_) throw InvalidArgument("engine", "runtime", "is missing");
  scheduler_ = make_scheduler();
  worker_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(wake_->m);
    stopping_ = true;
    ++wake_->events;
  }
  wake_->cv.notify_all();
  worker_.join();
}

std::unique_ptr<Engine::Job> Engine::make_job(ServeRequest request, RequestCallbacks callbacks) {
  const Runtime& rt = next_runtime_ ? *next_runtime_ : *runtime_;
  const ModelSpec& s = rt.store().spec();
  const GenerationRequest& g = request.generation;
  const int target = rt.target_of(request.target);
  if (target < 0) {
    std::vector<std::string> names;
    for (int t = 0; t < rt.store().targets(); ++t) names.push_back(rt.store().name(t));
    for (const auto& [alias, t] : rt.config().aliases)
      if (std::find(names.begin(), names.end(), alias) == names.end()) names.push_back(alias);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string_view near = nearest_name(request.target, std::vector<std::string_view>(names.begin(), names.end()));
    throw InvalidArgument("request", "target '" + request.target + "'",
                          "is not a variant being served" + (near.empty() ? std::string() : " (did you mean '" + std::string(near) + "'?)"),
                          "serve one of: " + list);
  }
  check_request(s, g.prompt, g.max_new_tokens, "request");
  if (request.prompt_logits && g.max_new_tokens != 0)
    throw InvalidArgument("request", "prompt logits", "a logits request generates no tokens", "ask for 0 new tokens");
  auto job = std::make_unique<Job>();
  job->sampler = std::make_unique<Sampler>(g.sampling);  // throws for sampling values out of range
  const std::int64_t total = static_cast<std::int64_t>(g.prompt.size()) + g.max_new_tokens;
  const KvBlockPool& kv = rt.kv_blocks();
  if (kv.capacity() && kv.blocks_for(total) > *kv.capacity())
    throw BudgetError("request", "KV cache of " + std::to_string(total) + " tokens",
                      "needs " + std::to_string(kv.blocks_for(total)) + " blocks of " + std::to_string(kv.block_tokens()) +
                          " tokens but the device budget holds " + std::to_string(*kv.capacity()),
                      "raise the budget or the reserved context, or ask for fewer tokens");
  job->target = target;
  job->tokens = g.prompt;
  job->seq.set = rt.set_of(target);
  job->seq.known = static_cast<std::int64_t>(g.prompt.size());
  job->seq.total = total;
  job->result.stats.prompt_tokens = job->seq.known;
  job->result.stats.counters.layers.resize(static_cast<std::size_t>(s.num_layers));
  job->request = std::move(request);
  job->callbacks = std::move(callbacks);
  return job;
}

std::shared_ptr<RequestHandle> Engine::submit(ServeRequest request, RequestCallbacks callbacks) {
  std::vector<ServeRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one), {std::move(callbacks)}).front();
}

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_all(std::vector<ServeRequest> requests,
                                                               const std::vector<RequestCallbacks>& callbacks) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  {
    std::lock_guard lock(wake_->m);
    std::vector<std::unique_ptr<Job>> jobs;
    const double now = (next_clock_ ? next_clock_ : clock_)->now();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      auto job = make_job(std::move(requests[i]), i < callbacks.size() ? callbacks[i] : RequestCallbacks{});
      job->seq.arrival = job->request.arrival.value_or(now);
      job->result.stats.arrival = job->seq.arrival;
      jobs.push_back(std::move(job));
    }
    for (auto& job : jobs) {
      job->seq.order = next_id_;
      job->handle.reset(new RequestHandle(next_id_++, job->request.target, wake_));
      handles.push_back(job->handle);
      incoming_.push_back(std::move(job));
      ++queued_;
    }
    ++wake_->events;
  }
  wake_->cv.notify_all();
  return handles;
}

double Engine::now() const {
  std::lock_guard lock(wake_->m);
  return clock_->now();
}

std::shared_ptr<Runtime> Engine::runtime() const {
  std::lock_guard lock(wake_->m);
  return next_runtime_ ? next_runtime_ : runtime_;
}

std::shared_ptr<Clock> Engine::clock() const {
  std::lock_guard lock(wake_->m);
  return next_clock_ ? next_clock_ : clock_;
}

SchedulerOptions Engine::scheduler_options() const {
  std::lock_guard lock(wake_->m);
  return next_scheduler_.value_or(scheduler_options_);
}

EngineStats Engine::stats() const {
  std::lock_guard lock(wake_->m);
  return stats_;
}

std::size_t Engine::queued() const {
  std::lock_guard lock(wake_->m);
  return queued_;
}

void Engine::set_runtime(std::shared_ptr<Runtime> runtime) {
  if (!runtime) throw InvalidArgument("engine", "runtime", "is missing");
  {
    std::lock_guard lock(wake_->m);
    next_runtime_ = std::move(runtime);
    ++wake_->events;
  }
  wake_->cv.notify_all();
}

std::future<RebaseResult> Engine::rebase(std::shared_ptr<const HostStore> next, RuntimeConfig config) {
  if (!next) throw InvalidArgument("engine", "next store", "is missing");
  std::future<RebaseResult> done;
  {
    std::lock_guard lock(wake_->m);
    if (next_rebase_) throw InvalidArgument("engine", "family change", "another is waiting for the next step", "wait for it first");
    next_rebase_.emplace(Rebase{std::move(next), std::move(config), {}});
    done = next_rebase_->done.get_future();
    ++wake_->events;
  }
  wake_->cv.notify_all();
  return done;
}

void Engine::set_scheduler(SchedulerOptions options) {
  Scheduler check(options, runtime()->kv_blocks(), 1);  // throws for bad values, here rather than later
  {
    std::lock_guard lock(wake_->m);
    next_scheduler_ = options;
    ++wake_->events;
  }
  wake_->cv.notify_all();
}

void Engine::set_clock(std::shared_ptr<Clock> clock) {
  if (!clock) throw InvalidArgument("engine", "clock", "is missing");
  {
    std::lock_guard lock(wake_->m);
    next_clock_ = std::move(clock);
    ++wake_->events;
  }
  wake_->cv.notify_all();
}

void Engine::finish(Job& job, Finish finish, std::string error) {
  if (job.done) return;
  job.done = true;
  ++finished_;
  scheduler_->remove(&job.seq);  // its blocks are free at once
  RequestResult& r = job.result;
  r.finish = finish;
  r.error = std::move(error);
  r.tokens.assign(job.tokens.begin() + static_cast<std::ptrdiff_t>(job.request.generation.prompt.size()), job.tokens.end());
  r.stats.generated_tokens = static_cast<std::int64_t>(r.tokens.size());
  r.stats.preemptions = job.seq.preemptions;
  {
    std::lock_guard lock(wake_->m);
    r.stats.finish = clock_->now();
    if (!job.admitted) r.stats.start = r.stats.first_token = std::max(r.stats.arrival, r.stats.finish);
    if (r.stats.generated_tokens == 0) r.stats.first_token = r.stats.finish;
    if (!job.admitted) --queued_;
  }
  // The callback first: whoever waits on the handle may tear down what the callback uses.
  if (job.callbacks.on_finish) job.callbacks.on_finish(*job.handle, r);
  job.handle->finish(r);
}

void Engine::forget_finished() {
  for (const auto& job : jobs_) {
    if (!job->done) continue;
    owner_.erase(&job->seq);
    if (job->arrived) continue;
    const auto [from, to] = pending_.equal_range(job->seq.arrival);  // cancelled before it arrived
    for (auto it = from; it != to; ++it)
      if (it->second == job.get()) {
        pending_.erase(it);
        break;
      }
  }
  std::erase_if(jobs_, [](const std::unique_ptr<Job>& j) { return j->done; });
  finished_ = 0;
}

std::unique_ptr<Scheduler> Engine::make_scheduler() const {
  // A step runs no more tokens than the runtime's activation workspace holds.
  SchedulerOptions o = scheduler_options_;
  o.max_batch_tokens = std::min(o.max_batch_tokens, runtime_->max_step_tokens());
  // Look-ahead swaps unless told otherwise, wherever a second set buffer lets a swap overlap decode;
  // never where nothing is filled ahead (time-sharing, throttled copies), asked for or not: a request
  // waiting there for a fill would wait for one that never comes.
  if (!runtime_->fills_ahead()) o.swap_ahead = false;
  else if (!o.swap_ahead) o.swap_ahead = runtime_->resident_capacity() >= 2;
  return std::make_unique<Scheduler>(o, runtime_->kv_blocks(), runtime_->resident_capacity());
}

void Engine::apply_changes(std::unique_lock<std::mutex>& lock) {
  // Called with the lock held; it is let go while jobs are moved (finishing refused ones runs callbacks).
  if (next_clock_) clock_ = std::move(next_clock_);
  next_clock_.reset();
  std::shared_ptr<Runtime> fresh = std::move(next_runtime_);
  next_runtime_.reset();
  if (next_scheduler_) scheduler_options_ = *next_scheduler_;
  const bool reschedule = fresh || next_scheduler_;
  next_scheduler_.reset();
  const std::shared_ptr<Runtime> old = runtime_;  // its KV pool outlives the old scheduler's hold on it
  if (fresh) runtime_ = fresh;  // before a change served in place, which was asked of it
  if (next_rebase_) rebase_now(lock);
  if (!reschedule) return;
  const Runtime& rt = *runtime_;
  lock.unlock();
  scheduler_->preempt_all();
  for (auto& job : jobs_)
    if (job->arrived && !job->done) scheduler_->remove(&job->seq);
  scheduler_ = make_scheduler();
  for (auto& job : jobs_) {
    if (job->done) continue;
    job->seq.computed = 0;
    job->result.logits = {};
    if (fresh) {
      job->target = rt.target_of(job->request.target);
      if (job->target < 0) {
        finish(*job, Finish::Failed, "the serving configuration changed and no longer serves '" + job->request.target + "'");
        continue;
      }
      job->seq.set = rt.set_of(job->target);
    }
    if (job->arrived) scheduler_->add(&job->seq);
  }
  lock.lock();
}

void Engine::rebase_now(std::unique_lock<std::mutex>& lock) {
  Rebase change = std::move(*next_rebase_);
  next_rebase_.reset();
  RebaseResult result;
  try {
    result = runtime_->rebase(std::move(change.store), std::move(change.config));  // under the lock: make_job reads its targets
  } catch (...) {
    change.done.set_exception(std::current_exception());
    return;
  }
  lock.unlock();
  const Runtime& rt = *runtime_;
  for (auto& job : jobs_) {
    if (job->done) continue;
    job->target = rt.target_of(job->request.target);
    if (job->target < 0) finish(*job, Finish::Failed, "the family changed and no longer serves '" + job->request.target + "'");
    else job->seq.set = rt.set_of(job->target);
  }
  scheduler_->forget_switch();  // it names sets by the ids they had
  change.done.set_value(result);
  lock.lock();
}

void Engine::run() {
  std::unique_lock lock(wake_->m);
  for (;;) {
    // Noted before anything is taken in: whatever comes after (even while apply_changes lets go of
    // the lock) makes this loop go round again instead of waiting.
    const std::uint64_t seen = wake_->events;
    const bool cancels = std::exchange(cancels_seen_, wake_->cancels) != wake_->cancels;
    while (!incoming_.empty()) {
      Job* job = incoming_.front().get();
      jobs_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
      owner_.emplace(&job->seq, job);
      pending_.emplace(job->seq.arrival, job);
    }
    if (stopping_) {
      lock.unlock();
      for (auto& job : jobs_) finish(*job, Finish::Cancelled);
      return;
    }
    apply_changes(lock);
    const std::shared_ptr<Clock> clock = clock_;
    lock.unlock();

    if (cancels)
      for (auto& job : jobs_)
        if (!job->done && job->handle->cancelled()) finish(*job, Finish::Cancelled);
    const double now = clock->now();
    // Arrivals in order, from those not yet arrived only: a step's work must not grow with the queue.
    double next_arrival = std::numeric_limits<double>::infinity();
    while (!pending_.empty()) {
      const auto first = pending_.begin();
      Job& job = *first->second;
      if (!job.done && job.seq.arrival > now) {
        next_arrival = job.seq.arrival;
        break;
      }
      pending_.erase(first);
      if (job.done) continue;  // cancelled before it arrived
      job.arrived = true;
      if (job.request.generation.max_new_tokens == 0 && !job.request.prompt_logits) finish(job, Finish::Length);
      else scheduler_->add(&job.seq);
    }
    bool ran = false;
    try {
      ran = step(now);
      if (!ran && runtime_->repins().pending > 0) {  // idle: a change's copies go in at once
        runtime_->repin(std::nullopt);
        ran = true;
      }
    } catch (const std::exception& e) {
      // A step that fails (the device out of memory, a bug) fails what it ran, not the engine.
      for (auto& job : jobs_)
        if (!job->done && job->seq.running) finish(*job, Finish::Failed, e.what());
      ran = true;
    }
    // Finished jobs are let go in batches, so that doing so costs a step nothing with a long queue.
    if (finished_ > 0 && finished_ * 8 >= jobs_.size()) forget_finished();

    lock.lock();
    if (ran || wake_->events != seen) continue;
    if (std::isfinite(next_arrival)) {
      if (clock->is_virtual()) {
        clock->idle_until(next_arrival);
        continue;
      }
      wake_->cv.wait_until(lock, clock->wall_deadline(next_arrival), [&] { return wake_->events != seen; });
    } else {
      wake_->cv.wait(lock, [&] { return wake_->events != seen; });
    }
  }
}

bool Engine::step(double now) {
  const std::vector<int> resident = runtime_->resident_sets();
  const bool ahead = scheduler_->options().ahead();
  StepPlan plan = scheduler_->plan(now, resident, ahead ? runtime_->loading_sets() : std::vector<int>{});
  for (const SequenceState* s : plan.preempted) owner_.at(s)->result.logits = {};  // recomputed from the start
  const bool sent_back = !plan.preempted.empty() || !plan.parked.empty();
  if (sent_back) {
    std::lock_guard lock(wake_->m);
    stats_.preemptions += static_cast<std::int64_t>(plan.preempted.size());
    stats_.parks += static_cast<std::int64_t>(plan.parked.size());
  }
  if (plan.empty()) return sent_back;
  Runtime& rt = *runtime_;

  // Which job each chunk belongs to, and the order the backend wants: chunks of one set adjacent.
  std::vector<Job*> job_of;
  for (const auto& c : plan.chunks) job_of.push_back(owner_.at(c.sequence));
  for (SequenceState* s : plan.admitted) {
    Job& job = *owner_.at(s);
    if (job.admitted) continue;  // recomputed after a preemption: its queue wait ended long ago
    job.admitted = true;
    job.result.stats.start = now;
    std::lock_guard lock(wake_->m);
    --queued_;
  }
  std::vector<std::size_t> order(plan.chunks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto pa = std::find(plan.sets.begin(), plan.sets.end(), plan.chunks[a].sequence->set);
    const auto pb = std::find(plan.sets.begin(), plan.sets.end(), plan.chunks[b].sequence->set);
    return pa < pb;
  });

  // The step's time: the wall clock's, or a simulated device's, which prices what it does (and
  // nothing of this host's scheduling and sampling).
  const DeviceTimer timer = rt.timer();
  double throttle = 0, swap_seconds = 0;
  std::int64_t swaps = 0, swaps_ahead = 0;
  for (const SwapRecord& r : rt.make_resident(plan.sets)) {
    throttle += r.throttle_seconds;
    swap_seconds += r.seconds;
    ++swaps;
    swaps_ahead += r.ahead;
    for (std::size_t i : order)  // charged to the first request of that set in this step
      if (plan.chunks[i].sequence->set == r.set) {
        RuntimeCounters& c = job_of[i]->result.stats.counters;
        ++c.swaps;
        c.swap_bytes += r.bytes;
        c.swap_seconds += r.seconds;
        break;
      }
  }
  StepBatch batch;
  batch.sequences = static_cast<int>(order.size());
  std::int64_t tokens = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto& c = plan.chunks[order[k]];
    Job& job = *job_of[order[k]];
    const bool last = c.sequence->computed + c.tokens == c.sequence->known;
    batch.chunks.push_back({static_cast<int>(k), job.target, rt.buffer_of(c.sequence->set),
                            std::span<const std::int64_t>(job.tokens).subspan(static_cast<std::size_t>(c.sequence->computed),
                                                                              static_cast<std::size_t>(c.tokens)),
                            c.sequence->computed, c.sequence->blocks,
                            job.request.prompt_logits ? Emit::All : last ? Emit::Last : Emit::Nothing,
                            static_cast<bool>(job.callbacks.on_routes)});
    if (last && !job.request.prompt_logits) batch.chunks.back().draw_temperature = job.sampler->params().temperature;
    batch.chunks.back().request = job.handle->id();
    tokens += c.tokens;
  }
  if (ahead) rt.load_ahead(plan.upcoming);  // while this step runs
  if (rt.reads_ahead()) {  // the host tier: what runs now stays, what waits comes in from disk
    std::vector<int> running, waiting;
    for (const auto& job : jobs_) {
      std::vector<int>& list = job->seq.running ? running : waiting;
      if (!job->done && std::find(list.begin(), list.end(), job->target) == list.end()) list.push_back(job->target);
    }
    rt.read_ahead(running, waiting);
  }
  StepResult result = rt.run(batch);
  // The tokens are drawn before the clock is read: a token exists once it is sampled.
  std::vector<TokenDraw> draws;
  constexpr std::size_t kNoDraw = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> draw_of(order.size(), kNoDraw);  // chunk k's draw, where it has one
  for (std::size_t k = 0; k < order.size(); ++k) {
    if (job_of[order[k]]->request.prompt_logits || result.failure(k)) continue;
    if (const std::optional<TokenDraw> d = step_draw(job_of[order[k]]->sampler.get(), result, k)) {
      draw_of[k] = draws.size();
      draws.push_back(*d);
    }
  }
  draw_tokens(draws, static_cast<unsigned>(configured_threads()));
  const std::shared_ptr<Clock> clock = this->clock();
  clock->worked(timer.seconds());
  clock->delay(throttle + result.throttle_seconds);
  const double done_at = clock->now();
  {
    std::lock_guard lock(wake_->m);
    ++stats_.steps;
    stats_.tokens += tokens;
    stats_.largest_step_tokens = std::max(stats_.largest_step_tokens, tokens);
    stats_.largest_step_sequences = std::max<std::int64_t>(stats_.largest_step_sequences, batch.sequences);
    stats_.swaps += swaps;
    stats_.swaps_ahead += swaps_ahead;
    stats_.swap_seconds += swap_seconds;
  }

  for (std::size_t k = 0; k < order.size(); ++k) {
    Job& job = *job_of[order[k]];
    SequenceState& seq = job.seq;
    if (job.callbacks.on_routes && !result.routes[k].empty()) job.callbacks.on_routes(*job.handle, seq.computed, result.routes[k]);
    seq.computed += plan.chunks[order[k]].tokens;
    RuntimeCounters& counters = job.result.stats.counters;
    for (std::size_t l = 0; l < counters.layers.size(); ++l) counters.layers[l] += result.counts[k][l];
    if (const std::string* why = result.failure(k)) {  // this request only: the others' values are untouched
      finish(job, Finish::Failed, "'" + job.request.target + "': " + *why);
      continue;
    }
    const Logits& logits = result.logits[k];
    if (job.request.prompt_logits) {
      Logits& all = job.result.logits;
      all.vocab = logits.vocab;
      all.rows += logits.rows;
      all.values.insert(all.values.end(), logits.values.begin(), logits.values.end());
      if (seq.computed == seq.known) finish(job, Finish::Length);
      continue;
    }
    if (draw_of[k] == kNoDraw) continue;  // a prompt chunk before the last
    const GenerationRequest& g = job.request.generation;
    const std::int64_t token = draws[draw_of[k]].token;
    job.tokens.push_back(token);
    const auto generated = static_cast<std::int64_t>(job.tokens.size() - g.prompt.size());
    if (generated == 1) job.result.stats.first_token = done_at;
    if (job.callbacks.on_token) job.callbacks.on_token(*job.handle, token, counters);
    if (std::find(g.stop_ids.begin(), g.stop_ids.end(), token) != g.stop_ids.end()) finish(job, Finish::Stop);
    else if (job.handle->cancelled()) finish(job, Finish::Cancelled);
    else if (generated >= g.max_new_tokens) finish(job, Finish::Length);
    else ++seq.known;
  }
  return true;
}

}  // namespace mosaic
