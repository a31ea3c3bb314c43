#pragma once
// Iteration-level scheduling (as Orca and vLLM do it): every step, one more token for each running
// sequence and the next prompt chunk of sequences being prefilled, within a token budget; waiting
// sequences admitted while the budget, the sequence limit, the KV blocks and the resident-set
// buffers allow. When every set buffer runs a set and another set's requests outweigh one of them,
// that set's running sequences are parked: they wait with their KV blocks and resume, nothing
// recomputed, once their set is back. When KV blocks run out, the newest running sequence is
// preempted: its blocks are freed and it waits to be recomputed from its tokens. Parked sequences
// keep theirs unless nothing else could run. Pure bookkeeping, no clock of its own.
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/kv_blocks.h"
#include "runtime/policies.h"

namespace mosaic {

// How the scheduler chooses among waiting requests whose resident sets are not all resident.
enum class SwitchPolicy {
  Fcfs,      // strictly in arrival order: a request whose set cannot join waits, and so do all after it
  Affinity,  // requests of sets already resident go first, then the other sets' by queued work
             // (tokens still to run, weighted up by their oldest request's wait against the bound).
             // Once the oldest has waited max_wait_seconds, it goes first with its set's other
             // requests, and the rest in the order they began to wait, until it starts. How a set
             // running in a buffer another set needs makes room, and which set comes in:
             // SchedulerOptions::park.
};

struct SchedulerOptions {
  std::int64_t max_batch_tokens = 512;  // tokens one step runs (the activation workspace)
  std::int64_t max_sequences = 256;     // sequences running at once (1: one request at a time)
  // Affinity unless asked otherwise: arrival order makes a batch of the head-of-queue run of one
  // variant and pays a swap for each (Fcfs is the paper's setting).
  SwitchPolicy switching = SwitchPolicy::Affinity;
  double max_wait_seconds = kDefaultMaxWait;  // Affinity's bound on how long a request waits for its set
  static constexpr double kDefaultMaxWait = 2.0;
  // Affinity: how a running set makes room for another.
  //  false (drain, the default): with every buffer running, once the set not in that has waited
  //    longest outweighs the running set whose sequences end soonest, and that set has run the
  //    requests that waited for its turn, it takes no new requests until the other is in (filled
  //    ahead into its buffer, or swapped in once its sequences are done); past the bound the same
  //    set drains while the others' requests keep joining. So the sets take turns in the order they
  //    began to wait, each turn as long as its requests' output.
  //  true (park): with every buffer running, the first set not in that outweighs the lightest running
  //    one (its running and queued work, weighed the same way) that has had its turn has that one's
  //    running sequences parked: they wait with their KV blocks and resume where they stopped once
  //    their set is back; past the bound the lightest running set that has had its turn is parked
  //    for the oldest's set. A set's turn is its share of all the work left times max_wait_seconds,
  //    and at least residency_seconds. Measured on the CPU (docs/benchmarks.md, 2026-11-29): it
  //    halves p99 TTFT at moderate load, but multiplies TPOT and lowers the rate sustained, so it is
  //    not the default.
  bool park = false;
  double residency_seconds = kDefaultResidency;  // park: the shortest turn
  static constexpr double kDefaultResidency = 0.1;
  // Look-ahead swaps: while anything runs, a waiting request whose set is not resident and ready
  // does not join (its swap would stall the running batch); it joins once the set is in. The sets
  // of all waiting requests (whatever keeps them waiting: the sequence limit, too) are listed in
  // StepPlan::upcoming, for the runtime to fill those not in into free buffers during the step.
  // nullopt: on wherever the runtime holds two sets or more and can fill one ahead (Engine decides).
  std::optional<bool> swap_ahead;
  bool ahead() const { return swap_ahead.value_or(false); }
  KvAdmission kv_admission = KvAdmission::Greedy;
};

// What the scheduler knows of a sequence. The engine owns them.
struct SequenceState {
  std::uint64_t order = 0;  // submission order: ties of arrival
  double arrival = 0;
  double waiting_since = 0;  // when it last began to wait: its arrival, or when it was parked
  int set = 0;              // the resident set its tokens need
  std::int64_t known = 0;   // tokens known so far (prompt, then generated ones)
  std::int64_t total = 0;   // the most it will ever hold (prompt + max new tokens)
  std::int64_t computed = 0;  // tokens whose keys and values are cached
  std::vector<std::int32_t> blocks;
  bool running = false;
  std::int64_t preemptions = 0;
  std::int64_t parks = 0;  // times it was parked: set aside with its blocks for another set
  bool parked() const { return !running && !blocks.empty(); }
};

struct StepPlan {
  struct Chunk {
    SequenceState* sequence;
    std::int64_t tokens;  // from sequence->computed
  };
  std::vector<Chunk> chunks;                // running sequences first (oldest first), then admitted ones
  std::vector<int> sets;                    // resident sets the step needs, in first-use order
  std::vector<SequenceState*> admitted;     // started running this step
  std::vector<SequenceState*> preempted;    // sent back to wait; their blocks are free again
  std::vector<SequenceState*> parked;       // sent back to wait with their blocks, for another set
  std::vector<int> upcoming;                // swap_ahead: sets waiting requests need (none of `sets`), in queue order
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerOptions options, KvBlockPool& blocks, int resident_capacity);

  const SchedulerOptions& options() const { return options_; }
  void add(SequenceState* s);     // arrived: waits, in arrival order
  void remove(SequenceState* s);  // finished or cancelled: forgotten, its blocks freed at once
  // Sends every running sequence back to wait and frees every sequence's blocks (parked ones' too),
  // e.g. when the runtime changes.
  void preempt_all();
  std::size_t waiting() const { return waiting_.size(); }
  // A switch of sets under way (Affinity) is given up: the sets were renumbered.
  void forget_switch() { switch_ = {}; }
  std::size_t running() const { return running_.size(); }
  // The next step at time `now`, with `resident` the sets the device holds now (Affinity prefers
  // them: their requests start without a swap) and `loading` those of them still being filled ahead.
  StepPlan plan(double now, std::span<const int> resident = {}, std::span<const int> loading = {});

 private:
  struct Queued {  // a set with requests waiting
    int set;
    double work = 0;    // tokens its waiting requests have still to run
    double oldest = 0;  // when the longest waiting of them began to wait
  };
  bool grow(SequenceState& s, std::int64_t tokens);  // blocks for `tokens` more; false when none are left
  std::int64_t longest_blocks(const SequenceState& s) const;  // the blocks it holds at its longest
  std::int64_t committed_blocks() const;  // KvAdmission::Reserve: what running and parked sequences may hold
  bool reclaim(const SequenceState* keep, StepPlan& plan);  // the latest parked (not `keep`) preempted; false: none
  void preempt(SequenceState& s);
  void park(SequenceState& s, double now);
  void wait(SequenceState& s);
  double priority(double work, double since, double now) const;  // work weighted up by its wait
  std::vector<Queued> queued_by_weight(double now) const;       // heaviest first
  void switch_sets(double now, bool strict, const std::vector<Queued>& queued, StepPlan& plan);  // park
  void drain_for_switch(double now, const std::vector<Queued>& queued, const StepPlan& plan, std::span<const int> resident,
                        std::span<const int> loading);  // drain
  int soonest_done(std::span<const int> sets) const;  // of `sets`, the one whose running sequences may end first
  void list_upcoming(StepPlan& plan) const;  // StepPlan::upcoming, once the step's admissions are made

  SchedulerOptions options_;
  KvBlockPool& blocks_;
  int capacity_;
  // A set chosen to come in, and the set parked or draining to free a buffer for it, whose requests
  // wait until the incoming set runs (-1, -1: none under way).
  struct Switch {
    int incoming = -1, out = -1;
  } switch_;
  std::deque<SequenceState*> waiting_;   // by (waiting_since, order)
  std::vector<SequenceState*> running_;  // by admission
  std::vector<std::pair<int, double>> running_since_;  // each set that ran in the last step, since when
};

}  // namespace mosaic
