#include "runtime/scheduler.h"

#include <algorithm>

#include "common/error.h"

namespace mosaic {
namespace {

bool contains(std::span<const int> sets, int set) { return std::find(sets.begin(), sets.end(), set) != sets.end(); }

}  // namespace

std::string_view switch_policy_name(SwitchPolicy p) { return p == SwitchPolicy::Fcfs ? "fcfs" : "affinity"; }

Scheduler::Scheduler(SchedulerOptions options, KvBlockPool& blocks, int resident_capacity)
    : options_(options), blocks_(blocks), capacity_(resident_capacity) {
  if (options_.max_batch_tokens < 1) throw InvalidArgument("scheduler", "max batch tokens", "must be at least 1");
  if (options_.max_sequences < 1) throw InvalidArgument("scheduler", "max sequences", "must be at least 1");
  if (!(options_.max_wait_seconds >= 0)) throw InvalidArgument("scheduler", "max wait", "must not be negative");
}

void Scheduler::wait(SequenceState& s) {
  s.running = false;
  const auto at = std::upper_bound(waiting_.begin(), waiting_.end(), &s, [](const SequenceState* a, const SequenceState* b) {
    return a->arrival < b->arrival || (a->arrival == b->arrival && a->order < b->order);
  });
  waiting_.insert(at, &s);
}

void Scheduler::add(SequenceState* s) { wait(*s); }

void Scheduler::remove(SequenceState* s) {
  std::erase(running_, s);
  std::erase(waiting_, s);
  blocks_.release(s->blocks);
  s->running = false;
}

void Scheduler::preempt(SequenceState& s) {
  std::erase(running_, &s);
  blocks_.release(s.blocks);
  s.computed = 0;  // recomputed from its tokens when it runs again
  ++s.preemptions;
  wait(s);
}

void Scheduler::preempt_all() {
  while (!running_.empty()) preempt(*running_.back());
}

bool Scheduler::grow(SequenceState& s, std::int64_t tokens) {
  const std::int64_t need = blocks_.blocks_for(s.computed + tokens) - static_cast<std::int64_t>(s.blocks.size());
  if (need > blocks_.free()) return false;
  for (std::int64_t i = 0; i < need; ++i) s.blocks.push_back(*blocks_.allocate());
  return true;
}

StepPlan Scheduler::plan(double now, std::span<const int> resident, std::span<const int> loading) {
  StepPlan plan;
  std::int64_t budget = options_.max_batch_tokens;
  auto use_set = [&](int set) {
    if (!contains(plan.sets, set)) plan.sets.push_back(set);
  };

  // Running sequences, oldest first: a decode token each, or their next prompt chunk. When blocks
  // run out, the newest running sequence gives its blocks back (possibly this one).
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    SequenceState& s = *running_[i];
    const std::int64_t n = std::min(s.known - s.computed, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool placed = true;
    while (!grow(s, n)) {
      SequenceState& victim = *running_.back();
      plan.preempted.push_back(&victim);
      preempt(victim);
      if (&victim == &s) {
        placed = false;
        break;
      }
    }
    if (!placed) continue;  // s was the newest; running_[i] is now the next one (or none)
    plan.chunks.push_back({&s, n});
    use_set(s.set);
    budget -= n;
    ++i;
  }
  for (const SequenceState* s : running_) use_set(s->set);  // their sets stay resident even if idle this step

  // Admission. FCFS: in arrival order, stopping at the first request that cannot start. Affinity:
  // first the requests whose set is resident already, then the other sets' by queued work, passing
  // over those whose set has no buffer free — unless the oldest has waited too long (then it and its
  // set first, the rest as FCFS).
  auto ready = [&](int set) {
    return contains(plan.sets, set) || (contains(resident, set) && !contains(loading, set));
  };
  const bool strict = options_.switching == SwitchPolicy::Fcfs ||
                      (!waiting_.empty() && now - waiting_.front()->arrival > options_.max_wait_seconds);
  auto admit = [&](auto&& eligible) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (budget <= 0 || static_cast<std::int64_t>(running_.size()) >= options_.max_sequences) return;
      SequenceState& s = **it;
      if (!eligible(s)) {
        ++it;
        continue;
      }
      if (options_.ahead() && !plan.chunks.empty() && !ready(s.set)) {
        // Joining now would stall the running batch for its swap: its set is loaded ahead instead.
        if (strict) return;
        ++it;
        continue;
      }
      const bool set_fits = contains(plan.sets, s.set) || static_cast<int>(plan.sets.size()) < capacity_;
      const std::int64_t n = std::min(s.known - s.computed, budget);
      if (!set_fits || !grow(s, n)) {
        if (strict || set_fits) return;  // no blocks: later requests would not get any either
        ++it;
        continue;
      }
      it = waiting_.erase(it);
      s.running = true;
      running_.push_back(&s);
      plan.admitted.push_back(&s);
      plan.chunks.push_back({&s, n});
      use_set(s.set);
      budget -= n;
    }
  };
  bool oldest_waits_for_fill = false;
  if (!strict) {
    // The sets with requests waiting, the most queued work first (tokens still to run), each weighted
    // up by how long its oldest request has waited against the bound: a set with much work waiting
    // goes before a lone request's, and a set waiting long goes before either.
    struct Queued {
      int set;
      double work = 0, oldest = 0;  // tokens still to run; the oldest request's arrival
    };
    std::vector<Queued> queued;  // in order of each set's oldest request (waiting_ is by arrival)
    for (const SequenceState* s : waiting_) {
      auto q = std::find_if(queued.begin(), queued.end(), [&](const Queued& x) { return x.set == s->set; });
      if (q == queued.end()) q = queued.insert(queued.end(), {s->set, 0, s->arrival});
      q->work += static_cast<double>(s->total - s->computed);
    }
    auto priority = [&](const Queued& q) {
      const double age = std::max(0.0, now - q.oldest);
      return q.work * (1.0 + (options_.max_wait_seconds > 0 ? age / options_.max_wait_seconds : age));
    };
    std::stable_sort(queued.begin(), queued.end(), [&](const Queued& a, const Queued& b) { return priority(a) > priority(b); });
    if (options_.ahead()) {
      // A set is filled ahead only into a buffer no running sequence uses. While every buffer runs a
      // set whose requests keep joining, none ever frees, and a set not in waits for the bound. So
      // once the first set not in outweighs the one whose running sequences end soonest (its own
      // queued work, weighed the same way), that one drains: none of its requests join until the
      // other is in. The choice holds until then, or else the two would trade places step by step.
      const auto weight = [&](int set) {
        const auto q = std::find_if(queued.begin(), queued.end(), [&](const Queued& x) { return x.set == set; });
        return q == queued.end() ? 0.0 : priority(*q);
      };
      const bool waits = std::any_of(queued.begin(), queued.end(), [&](const Queued& q) { return q.set == switch_.incoming; });
      if (switch_.incoming >= 0 && !waits) switch_ = {};
      if (switch_.incoming < 0 && !plan.chunks.empty() && static_cast<int>(plan.sets.size()) >= capacity_) {
        const auto next = std::find_if(queued.begin(), queued.end(), [&](const Queued& q) { return !ready(q.set); });
        const int drain = soonest_done(plan.sets);
        if (next != queued.end() && priority(*next) > weight(drain)) switch_ = {next->set, drain};
      }
    }
    admit([&](const SequenceState& s) { return s.set != switch_.draining && contains(resident, s.set); });
    for (const Queued& q : queued)
      if (q.set != switch_.draining) admit([set = q.set](const SequenceState& s) { return s.set == set; });
    // Ended once its set runs, not once it is filled: filled but kept out (the sequence limit, the
    // blocks), it stays listed first, or an older request's fill would take its buffer back.
    if (switch_.incoming >= 0 && contains(plan.sets, switch_.incoming)) switch_ = {};
  } else if (options_.switching == SwitchPolicy::Affinity && !waiting_.empty()) {
    // Past the bound the oldest goes first, and the requests of its set with it: its swap is paid
    // once for all of them, where arrival order would run the head of the queue alone.
    const int oldest = waiting_.front()->set;
    switch_ = {};  // a switch chosen by weight gives way to the oldest
    admit([oldest](const SequenceState& s) { return s.set == oldest; });
    if (options_.ahead() && !plan.chunks.empty() && !ready(oldest)) {
      // Its set is being filled ahead, into a buffer no running sequence uses. Meanwhile requests
      // of the sets the step runs join (they take no buffer), but not the set to drain when every
      // buffer is in use: the one whose running sequences end soonest, which frees a buffer for the
      // fill. Stopping every admission instead would drain all sets, and the batch with them.
      const int drain = static_cast<int>(plan.sets.size()) < capacity_ ? -1 : soonest_done(plan.sets);
      admit([&](const SequenceState& s) { return s.set != drain && contains(plan.sets, s.set); });
      oldest_waits_for_fill = true;
    }
  }
  if (!oldest_waits_for_fill) admit([&](const SequenceState& s) { return s.set != switch_.draining; });
  list_upcoming(plan);
  return plan;
}

int Scheduler::soonest_done(std::span<const int> sets) const {
  int best = -1;
  std::int64_t best_left = 0;
  for (int set : sets) {
    std::int64_t left = 0;  // the most tokens one of its running sequences may still run
    for (const SequenceState* s : running_)
      if (s->set == set) left = std::max(left, s->total - s->computed);
    if (best < 0 || left < best_left) best = set, best_left = left;
  }
  return best;
}

void Scheduler::list_upcoming(StepPlan& plan) const {
  // Whatever keeps them waiting (their set, the sequence limit, the token budget), the sets the
  // waiting requests need next, for the runtime to fill ahead into buffers this step leaves free —
  // those in already too, so that a fill for a later request does not evict them.
  // A switch under way lists its set first, and not the set draining for it: that buffer is its.
  if (!options_.ahead()) return;
  if (switch_.incoming >= 0 && !contains(plan.sets, switch_.incoming))
    plan.upcoming.push_back(switch_.incoming);
  for (const SequenceState* s : waiting_)
    if (s->set != switch_.draining && !contains(plan.sets, s->set) && !contains(plan.upcoming, s->set))
      plan.upcoming.push_back(s->set);
}

}  // namespace mosaic
