#include "runtime/scheduler.h"

#include <algorithm>

#include "common/error.h"

namespace mosaic {
namespace {

bool contains(std::span<const int> sets, int set) { return std::find(sets.begin(), sets.end(), set) != sets.end(); }

// Whether a request of `set` can join the step without waiting for a swap: its set runs in the step
// already, or is resident and not still being filled ahead.
bool ready(int set, const StepPlan& plan, std::span<const int> resident, std::span<const int> loading) {
  return contains(plan.sets, set) || (contains(resident, set) && !contains(loading, set));
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options, KvBlockPool& blocks, int resident_capacity)
    : options_(options), blocks_(blocks), capacity_(resident_capacity) {
  if (options_.max_batch_tokens < 1) throw InvalidArgument("scheduler", "max batch tokens", "must be at least 1");
  if (options_.max_sequences < 1) throw InvalidArgument("scheduler", "max sequences", "must be at least 1");
  if (!(options_.max_wait_seconds >= 0)) throw InvalidArgument("scheduler", "max wait", "must not be negative");
  if (!(options_.residency_seconds >= 0)) throw InvalidArgument("scheduler", "residency", "must not be negative");
}

void Scheduler::wait(SequenceState& s) {
  s.running = false;
  const auto at = std::upper_bound(waiting_.begin(), waiting_.end(), &s, [](const SequenceState* a, const SequenceState* b) {
    return a->waiting_since < b->waiting_since || (a->waiting_since == b->waiting_since && a->order < b->order);
  });
  waiting_.insert(at, &s);
}

void Scheduler::add(SequenceState* s) {
  s->waiting_since = s->arrival;
  wait(*s);
}

void Scheduler::remove(SequenceState* s) {
  std::erase(running_, s);
  std::erase(waiting_, s);
  blocks_.release(s->blocks);
  s->running = false;
}

void Scheduler::preempt(SequenceState& s) {
  blocks_.release(s.blocks);
  s.computed = 0;  // recomputed from its tokens when it runs again
  ++s.preemptions;
  if (!s.running) return;  // parked: it waits where it did, in the order it began to
  std::erase(running_, &s);
  wait(s);  // where it first began to wait: ahead of those that came after it
}

void Scheduler::park(SequenceState& s, double now) {
  std::erase(running_, &s);
  s.waiting_since = now;
  ++s.parks;
  wait(s);
}

void Scheduler::preempt_all() {
  while (!running_.empty()) preempt(*running_.back());
  for (SequenceState* s : waiting_)
    if (s->parked()) preempt(*s);
}

bool Scheduler::grow(SequenceState& s, std::int64_t tokens) {
  const std::int64_t need = blocks_.blocks_for(s.computed + tokens) - static_cast<std::int64_t>(s.blocks.size());
  if (need > blocks_.free()) return false;
  for (std::int64_t i = 0; i < need; ++i) s.blocks.push_back(*blocks_.allocate());
  return true;
}

std::int64_t Scheduler::longest_blocks(const SequenceState& s) const {
  return std::max(blocks_.blocks_for(s.total), static_cast<std::int64_t>(s.blocks.size()));
}

std::int64_t Scheduler::committed_blocks() const {
  std::int64_t n = 0;
  for (const SequenceState* s : running_) n += longest_blocks(*s);
  for (const SequenceState* s : waiting_)
    if (s->parked()) n += longest_blocks(*s);
  return n;
}

bool Scheduler::reclaim(const SequenceState* keep, StepPlan& plan) {
  // The latest parked: its set is the furthest from coming back (waiting_ is by waiting_since).
  for (auto it = waiting_.rbegin(); it != waiting_.rend(); ++it)
    if (*it != keep && (*it)->parked()) {
      preempt(**it);
      plan.preempted.push_back(*it);
      return true;
    }
  return false;
}

double Scheduler::priority(double work, double since, double now) const {
  const double age = std::max(0.0, now - since);
  return work * (1.0 + (options_.max_wait_seconds > 0 ? age / options_.max_wait_seconds : age));
}

std::vector<Scheduler::Queued> Scheduler::queued_by_weight(double now) const {
  // The sets with requests waiting, the most queued work first (tokens still to run), each weighted
  // up by how long its longest waiting request has waited against the bound: a set with much work
  // waiting goes before a lone request's, and a set waiting long goes before either.
  std::vector<Queued> queued;  // in the order each set's longest waiting request began to wait
  for (const SequenceState* s : waiting_) {
    auto q = std::find_if(queued.begin(), queued.end(), [&](const Queued& x) { return x.set == s->set; });
    if (q == queued.end()) q = queued.insert(queued.end(), {s->set, 0, s->waiting_since});
    q->work += static_cast<double>(s->total - s->computed);
  }
  std::stable_sort(queued.begin(), queued.end(), [&](const Queued& a, const Queued& b) {
    return priority(a.work, a.oldest, now) > priority(b.work, b.oldest, now);
  });
  return queued;
}

void Scheduler::switch_sets(double now, bool strict, const std::vector<Queued>& queued, StepPlan& plan) {
  // Parking (SchedulerOptions::park): drained, a set's running sequences would hold its buffer for up
  // to their whole output (every request of the incoming set waiting meanwhile); parked they give it
  // up at once and lose nothing but time — their blocks stay theirs, and they resume where they
  // stopped. The time is the catch: they decode across turns, more are in flight, and KV runs out.
  const int oldest = waiting_.empty() ? -1 : waiting_.front()->set;
  if (strict && switch_.incoming != oldest) switch_ = {};  // a switch chosen by weight gives way to the oldest
  if (switch_.incoming >= 0) return;  // under way: the choice holds until its set runs
  std::vector<int> running_sets;
  for (const SequenceState* s : running_)
    if (!contains(running_sets, s->set)) running_sets.push_back(s->set);
  if (static_cast<int>(running_sets.size()) < capacity_) return;  // a buffer is free of running sequences
  int incoming = -1;
  if (strict) incoming = oldest;
  else
    for (const Queued& q : queued)
      if (!contains(running_sets, q.set)) {
        incoming = q.set;
        break;
      }
  if (incoming < 0 || contains(running_sets, incoming)) return;
  // The lightest running set that has had its turn: all the work it has left, running and queued,
  // weighed as queued work is.
  int victim = -1;
  double lightest = 0;
  double all_work = 0;
  for (const SequenceState* s : running_) all_work += static_cast<double>(s->total - s->computed);
  for (const Queued& q : queued) all_work += q.work;
  for (int set : running_sets) {
    double work = 0, from = now;
    for (const SequenceState* s : running_)
      if (s->set == set) work += static_cast<double>(s->total - s->computed);
    for (const Queued& q : queued)
      if (q.set == set) work += q.work, from = q.oldest;
    // Its turn: its share of all the work left, of the bound — every set then waits about the bound
    // at most between turns, and a set with much work runs long enough to batch it.
    const double turn = all_work > 0 ? options_.max_wait_seconds * work / all_work : 0;
    const double residency = std::max(options_.residency_seconds, turn);
    const auto since = std::find_if(running_since_.begin(), running_since_.end(), [&](const auto& r) { return r.first == set; });
    if (since != running_since_.end() && now - since->second < residency) continue;
    const double weight = priority(work, from, now);
    if (victim < 0 || weight < lightest) victim = set, lightest = weight;
  }
  if (victim < 0) return;
  if (!strict) {
    const auto in = std::find_if(queued.begin(), queued.end(), [&](const Queued& q) { return q.set == incoming; });
    if (!(priority(in->work, in->oldest, now) > lightest)) return;
  }
  if (options_.kv_admission == KvAdmission::Reserve && blocks_.capacity()) {
    // Parked, its sequences keep their blocks and their reservation: park them only where the incoming
    // set's oldest request fits beside them, or admitting it would take their blocks back — the
    // recomputation parking exists to avoid. Otherwise they run on, as draining would.
    const auto head = std::find_if(waiting_.begin(), waiting_.end(), [&](const SequenceState* s) { return s->set == incoming; });
    if (head != waiting_.end() && committed_blocks() + longest_blocks(**head) > *blocks_.capacity()) return;
  }
  for (std::size_t i = running_.size(); i-- > 0;)
    if (running_[i]->set == victim) {
      SequenceState& s = *running_[i];
      plan.parked.push_back(&s);
      park(s, now);
    }
  switch_ = {incoming, victim};
}

void Scheduler::drain_for_switch(double now, const std::vector<Queued>& queued, const StepPlan& plan, std::span<const int> resident,
                                 std::span<const int> loading) {
  // Draining (SchedulerOptions::park off): a set comes in only to a buffer no running sequence uses
  // (filled ahead into it, or swapped in when the step starts). While every buffer runs a set whose
  // requests keep joining, none ever frees, and a set not in waits for the bound. So once the set not
  // in that has waited longest outweighs the one whose running sequences end soonest (its own queued
  // work, weighed the same way), that one drains: none of its requests join until the other is in.
  // The choice holds until then, or else the two would trade places step by step.
  //  - Longest waiting, not heaviest: the sets then take turns in order, and a request waits at most
  //    one round of the others' turns (heaviest first let a set with a burst queued go twice in a
  //    round, and the others' requests reached the bound).
  //  - Not before the set has run what waited for it when its turn began: with the token budget full,
  //    the rest of those would wait a whole round again, and the sets' turns would be capped at one
  //    step's admissions (measured on the simulated clock: consolidated fell behind at 56 req/s,
  //    docs/benchmarks.md, 2026-12-01).
  const auto weight = [&](int set) {
    const auto q = std::find_if(queued.begin(), queued.end(), [&](const Queued& x) { return x.set == set; });
    return q == queued.end() ? 0.0 : priority(q->work, q->oldest, now);
  };
  if (switch_.incoming >= 0 || plan.chunks.empty() || static_cast<int>(plan.sets.size()) < capacity_) return;
  auto next = queued.end();
  for (auto q = queued.begin(); q != queued.end(); ++q)
    if (!ready(q->set, plan, resident, loading) && (next == queued.end() || q->oldest < next->oldest)) next = q;
  const int drain = soonest_done(plan.sets);
  if (next == queued.end() || !(priority(next->work, next->oldest, now) > weight(drain))) return;
  const auto since = std::find_if(running_since_.begin(), running_since_.end(), [&](const auto& r) { return r.first == drain; });
  if (since != running_since_.end())
    for (const SequenceState* s : waiting_)
      if (s->set == drain && s->waiting_since <= since->second) return;  // waited for this turn: it runs first
  switch_ = {next->set, drain};
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

StepPlan Scheduler::plan(double now, std::span<const int> resident, std::span<const int> loading) {
  StepPlan plan;
  std::int64_t budget = options_.max_batch_tokens;
  auto use_set = [&](int set) {
    if (!contains(plan.sets, set)) plan.sets.push_back(set);
  };
  const bool affinity = options_.switching == SwitchPolicy::Affinity;
  const auto past_bound = [&] {
    return !affinity || (!waiting_.empty() && now - waiting_.front()->waiting_since > options_.max_wait_seconds);
  };
  bool strict = past_bound();
  std::vector<Queued> queued = affinity ? queued_by_weight(now) : std::vector<Queued>{};
  // A switch ends once its set runs, or once nothing of that set waits any more.
  if (std::none_of(queued.begin(), queued.end(), [&](const Queued& q) { return q.set == switch_.incoming; })) switch_ = {};
  if (affinity && options_.park) switch_sets(now, strict, queued, plan);

  // Running sequences, oldest first: a decode token each, or their next prompt chunk. When blocks
  // run out, the newest running one gives its blocks back (possibly this one). Not a parked one:
  // recomputing a young sequence costs little, a parked one's may be most of its output, and taking
  // parked blocks to admit more work feeds on itself (measured: 250 preemptions and a backlog that
  // grew without end at a rate served without them).
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
  if (affinity && !plan.preempted.empty()) {  // they wait again
    queued = queued_by_weight(now);
    strict = past_bound();
  }

  // Admission. FCFS: in the order they began to wait, stopping at the first request that cannot
  // start. Affinity: first the requests whose set is resident already, then the other sets' by
  // queued work, passing over those whose set has no buffer free — unless the oldest has waited too
  // long (then it and its set first, the rest as FCFS). A parked set's requests wait for the set it
  // made room for.
  // Reserve: what every running and parked sequence may yet hold. A request joins only where its
  // longest fits beside them; where nothing would run, parked sequences give their blocks back until
  // it does (as greedy takes them below: waiting would free none).
  const bool reserve = options_.kv_admission == KvAdmission::Reserve && blocks_.capacity();
  std::int64_t committed = reserve ? committed_blocks() : 0;
  auto blocks_for = [&](SequenceState& s, std::int64_t n) {
    if (reserve) {
      // Every holder is counted at its longest, so where s's longest fits beside them its blocks are free.
      const std::int64_t more = s.parked() ? 0 : longest_blocks(s);  // a parked one is counted already
      while (committed + more > *blocks_.capacity()) {
        if (!plan.chunks.empty() || !reclaim(&s, plan)) return false;
        committed = committed_blocks();
      }
      if (!grow(s, n)) return false;
      committed += more;
      return true;
    }
    if (grow(s, n)) return true;
    if (!plan.chunks.empty()) return false;  // parked blocks are taken only where nothing would run
    while (reclaim(&s, plan))
      if (grow(s, n)) return true;
    return false;
  };
  auto admit_one_pass = [&](auto&& eligible) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (budget <= 0 || static_cast<std::int64_t>(running_.size()) >= options_.max_sequences) return;
      SequenceState& s = **it;
      if (!eligible(s)) {
        ++it;
        continue;
      }
      if (options_.ahead() && !plan.chunks.empty() && !ready(s.set, plan, resident, loading)) {
        // Joining now would stall the running batch for its swap: its set is loaded ahead instead.
        if (strict) return;
        ++it;
        continue;
      }
      const bool set_fits = contains(plan.sets, s.set) || static_cast<int>(plan.sets.size()) < capacity_;
      const std::int64_t n = std::min(s.known - s.computed, budget);
      if (!set_fits || !blocks_for(s, n)) {
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
  // Parked sequences first: they resume without recomputing, and their blocks are held meanwhile.
  auto admit = [&](auto&& eligible) {
    admit_one_pass([&](const SequenceState& s) { return s.parked() && eligible(s); });
    admit_one_pass(eligible);
  };
  if (affinity && !strict && !options_.park) drain_for_switch(now, queued, plan, resident, loading);
  if (affinity && strict && !options_.park) switch_ = {};  // a switch chosen by weight gives way to the oldest
  // The set parked or draining for the set switching in: its requests wait until that one runs.
  const auto out = [&] { return switch_.out; };
  bool oldest_waits_for_fill = false;
  if (affinity && !strict) {
    admit([&](const SequenceState& s) { return s.set != out() && contains(resident, s.set); });
    // The set switching in takes the buffer freed for it before heavier sets do.
    if (switch_.incoming >= 0) admit([set = switch_.incoming](const SequenceState& s) { return s.set == set; });
    for (const Queued& q : queued)
      if (q.set != out()) admit([set = q.set](const SequenceState& s) { return s.set == set; });
    // Ended once its set runs, not once it is filled: filled but kept out (the sequence limit, the
    // blocks), it stays listed first, or an older request's fill would take its buffer back.
    if (switch_.incoming >= 0 && contains(plan.sets, switch_.incoming)) switch_ = {};
  } else if (affinity && !waiting_.empty()) {
    // Past the bound the oldest goes first, and the requests of its set with it: its swap is paid
    // once for all of them, where arrival order would run the head of the queue alone.
    const int oldest = waiting_.front()->set;
    admit([oldest](const SequenceState& s) { return s.set == oldest; });
    if (options_.ahead() && !plan.chunks.empty() && !ready(oldest, plan, resident, loading)) {
      // Its set is being filled ahead, into the buffer parked for it, or (draining) the buffer of the
      // set whose running sequences end soonest, where every buffer is in use. Meanwhile requests of
      // the sets the step runs join (they take no buffer), but not that set's, nor those of a set
      // resident but idle: they would take the buffer the fill needs. Stopping every admission
      // instead would drain all sets, and the batch with them.
      const int drain = options_.park                                ? switch_.out
                        : static_cast<int>(plan.sets.size()) < capacity_ ? -1
                                                                       : soonest_done(plan.sets);
      admit([&](const SequenceState& s) { return s.set != drain && contains(plan.sets, s.set); });
      oldest_waits_for_fill = true;
    }
  }
  if (!oldest_waits_for_fill) admit([&](const SequenceState& s) { return s.set != out(); });
  if (switch_.incoming >= 0 && contains(plan.sets, switch_.incoming)) switch_ = {};

  {  // how long each set has run without a break: park's turns, and what waited for a drained set's turn
    std::vector<std::pair<int, double>> since;
    for (int set : plan.sets) {
      const auto was = std::find_if(running_since_.begin(), running_since_.end(), [&](const auto& r) { return r.first == set; });
      since.emplace_back(set, was == running_since_.end() ? now : was->second);
    }
    running_since_ = std::move(since);
  }
  list_upcoming(plan);
  return plan;
}

void Scheduler::list_upcoming(StepPlan& plan) const {
  // Whatever keeps them waiting (their set, the sequence limit, the token budget), the sets the
  // waiting requests need next, for the runtime to fill ahead into buffers this step leaves free —
  // those in already too, so that a fill for a later request does not evict them.
  // A switch under way lists its set first, and not the set parked for it: that buffer is its.
  if (!options_.ahead()) return;
  if (switch_.incoming >= 0 && !contains(plan.sets, switch_.incoming))
    plan.upcoming.push_back(switch_.incoming);
  for (const SequenceState* s : waiting_)
    if (s->set != switch_.out && !contains(plan.sets, s->set) && !contains(plan.upcoming, s->set))
      plan.upcoming.push_back(s->set);
}

}  // namespace mosaic
