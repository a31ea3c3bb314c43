#include "serving/simulator.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "runtime/kv_blocks.h"
#include "runtime/reconfigurer.h"
#include "sim/routing_model.h"
#include "sim/step_cost.h"

namespace mosaic {
namespace {

struct Request {
  SequenceState state;
  std::size_t index = 0;  // in the workload
  int target = 0;
  std::int64_t max_new = 0, generated = 0;
  bool admitted = false;
  RequestRecord record;
};

// A layer's kept misses (lru): (target, expert) by last use.
struct Spares {
  std::vector<std::pair<int, int>> held;
  std::vector<std::uint64_t> used;
  int find(int target, int expert) const {
    for (std::size_t i = 0; i < held.size(); ++i)
      if (held[i] == std::pair{target, expert}) return static_cast<int>(i);
    return -1;
  }
};

void simulate_lane(const ModelShapes& m, const DeviceProfile& device, const SimPartition& p, std::size_t lane,
                   std::vector<Request>& all, const std::vector<Request*>& requests, std::uint64_t seed, double concentration) {
  // A sequence's order is its workload index (simulate_workload sets it).
  auto owner_of = [&all](const SequenceState* q) -> Request& { return all[static_cast<std::size_t>(q->order)]; };
  const ModelSpec& s = m.spec;
  KvBlockPool kv(p.kv_block_tokens, p.kv_blocks);
  Scheduler scheduler(p.scheduler, kv, p.resident_sets);
  Reconfigurer sets(p.resident_sets);
  sets.ensure(std::span<const int>(&p.warm_set, 1));
  // What a token may be routed to in each layer: every expert, or under masked gating the resident ones.
  std::vector<std::vector<int>> choices(static_cast<std::size_t>(s.num_layers));
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    if (!s.is_sparse(l)) continue;
    for (int e = 0; e < s.num_experts; ++e)
      if (p.miss != "masked" || p.pinned[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)]) choices[static_cast<std::size_t>(l)].push_back(e);
    if (static_cast<std::int64_t>(choices[static_cast<std::size_t>(l)].size()) < s.top_k)
      throw InvalidArgument("simulated deployment", "layer " + std::to_string(l), "keeps fewer experts than top_k under masked gating");
  }
  std::vector<Spares> spares(static_cast<std::size_t>(s.num_layers));
  SimRouter router(concentration, seed, s.num_experts, s.top_k);
  std::uint64_t tick = 0;
  const double expert_load = copy_seconds(m.expert_bytes(), p.expert_bandwidth, p.copy_slowdown, device.copy_setup_seconds);
  const double set_fill = copy_seconds(p.set_bytes, p.set_bandwidth, p.copy_slowdown, device.copy_setup_seconds);

  // Look-ahead fills (SchedulerOptions::swap_ahead): set and seconds of copying left, in the order
  // they began. They share the host link one after another, and only while no step copies: a step's
  // own swaps and expert loads go first, as its critical path.
  std::vector<std::pair<int, double>> filling;
  auto link_idle = [&](double seconds) {
    for (auto& [set, left] : filling) {
      const double used = std::min(left, seconds);
      left -= used;
      seconds -= used;
    }
  };
  auto loading = [&] {
    std::vector<int> out;
    for (const auto& [set, left] : filling)
      if (left > 0) out.push_back(set);
    return out;
  };

  std::size_t next = 0;
  double now = 0;
  std::vector<int> picked;
  for (;;) {
    while (next < requests.size() && requests[next]->state.arrival <= now) scheduler.add(&requests[next++]->state);
    const StepPlan plan = scheduler.plan(now, sets.resident(), loading());
    if (plan.empty()) {
      if (!plan.preempted.empty() || !plan.parked.empty()) continue;
      if (next < requests.size()) {
        const double until = std::max(now, requests[next]->state.arrival);
        link_idle(until - now);
        now = until;
        continue;
      }
      if (scheduler.waiting() > 0)  // cannot happen for requests the KV reserve holds: the engine refuses the rest at submit
        throw BudgetError("simulated deployment", "KV cache", "cannot hold a waiting request", "reserve a longer context");
      break;
    }
    for (SequenceState* a : plan.admitted) {
      Request& r = owner_of(a);
      if (!r.admitted) r.record.stats.start = now;
      r.admitted = true;
    }
    double seconds = 0;
    auto charge = [&](int set, double waited) {
      seconds += waited;
      for (const auto& c : plan.chunks)  // charged to the step's first request of that set
        if (c.sequence->set == set) {
          RuntimeCounters& counters = owner_of(c.sequence).record.stats.counters;
          ++counters.swaps;
          counters.swap_bytes += p.set_bytes;
          counters.swap_seconds += waited;
          break;
        }
    };
    for (const auto& [buffer, set] : sets.ensure(plan.sets)) charge(set, set_fill);
    std::erase_if(filling, [&](const std::pair<int, double>& f) {
      const bool needed = std::find(plan.sets.begin(), plan.sets.end(), f.first) != plan.sets.end();
      if (needed) charge(f.first, f.second);  // what is left of its fill, waited for
      return needed || sets.buffer_of(f.first) < 0;  // claimed, or its buffer refilled for this step
    });
    if (p.scheduler.swap_ahead && p.copy_slowdown == 1.0)  // as Runtime::load_ahead
      for (std::size_t i = 0; i < plan.upcoming.size(); ++i) {
        const int set = plan.upcoming[i];
        if (sets.buffer_of(set) >= 0) continue;
        if (sets.ahead(set, std::span<const int>(plan.upcoming).first(i)) < 0) break;
        filling.emplace_back(set, set_fill);
      }
    // One token alone (a request decoding by itself): its layers are priced one by one, with their
    // hits among its top-k and the loads they waited for, for Multi-MoE's Table 1.
    const StepPlan::Chunk* alone = nullptr;
    std::int64_t step_tokens = 0;
    for (const auto& c : plan.chunks) {
      step_tokens += c.tokens;
      if (c.tokens > 0) alone = &c;
    }
    if (step_tokens != 1) alone = nullptr;
    std::vector<std::int64_t> alone_hits(static_cast<std::size_t>(s.num_layers));
    std::vector<double> alone_loads(static_cast<std::size_t>(s.num_layers));
    StepWork work;
    work.groups = static_cast<std::int64_t>(plan.sets.size());
    work.expert_rows.resize(static_cast<std::size_t>(s.num_layers));
    ++tick;
    for (std::int64_t l = 0; l < s.num_layers; ++l) {
      if (!s.is_sparse(l)) continue;
      const auto li = static_cast<std::size_t>(l);
      std::map<std::pair<int, int>, std::int64_t> rows;  // (target or -1 for a pinned copy, expert) → rows
      std::vector<std::pair<int, int>> loaded;
      for (const auto& c : plan.chunks) {
        Request& r = owner_of(c.sequence);
        LayerCounts& counts = r.record.stats.counters.layers[li];
        for (std::int64_t pos = c.sequence->computed; pos < c.sequence->computed + c.tokens; ++pos) {
          router.route(r.index, pos, l, choices[li], picked);
          for (int e : picked) {
            if (p.pinned[li][static_cast<std::size_t>(e)]) {
              ++counts.hits;
              ++alone_hits[li];
              ++rows[{-1, e}];
              continue;
            }
            const std::pair<int, int> own{r.target, e};
            if (const int at = spares[li].find(r.target, e); at >= 0) {
              ++counts.hits;
              ++alone_hits[li];
              spares[li].used[static_cast<std::size_t>(at)] = tick;
            } else {
              ++counts.misses;
              if (std::find(loaded.begin(), loaded.end(), own) == loaded.end()) {
                loaded.push_back(own);
                ++counts.loads;
                counts.load_bytes += m.expert_bytes();
                counts.load_seconds += expert_load;
                alone_loads[li] += expert_load;
                seconds += expert_load;
              }
            }
            ++rows[own];
          }
        }
      }
      if (p.miss == "lru")
        for (const auto& own : loaded) {
          Spares& sp = spares[li];
          if (p.spare <= 0) break;
          if (static_cast<std::int64_t>(sp.held.size()) < p.spare) {
            sp.held.push_back(own);
            sp.used.push_back(tick);
          } else {
            const auto victim = static_cast<std::size_t>(std::min_element(sp.used.begin(), sp.used.end()) - sp.used.begin());
            sp.held[victim] = own;
            sp.used[victim] = tick;
          }
        }
      for (const auto& [key, n] : rows) work.expert_rows[li].push_back(n);
    }
    for (const auto& c : plan.chunks) {
      work.chunks.push_back({c.tokens, c.sequence->computed + c.tokens});
      if (c.sequence->computed + c.tokens == c.sequence->known) ++work.emitted;
    }
    const StepCost cost = price_step(m, device, work);
    now += seconds + cost.seconds(p.compute_slowdown);
    link_idle(cost.seconds(p.compute_slowdown));
    if (alone)
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        if (s.is_sparse(l)) {
          const auto li = static_cast<std::size_t>(l);
          owner_of(alone->sequence).record.stats.counters.layers[li].add_alone(
              alone_hits[li], cost.attention[li].seconds(p.compute_slowdown), cost.block[li].seconds(p.compute_slowdown) + alone_loads[li]);
        }

    for (const auto& c : plan.chunks) {
      Request& r = owner_of(c.sequence);
      SequenceState& q = r.state;
      q.computed += c.tokens;
      if (q.computed < q.known) continue;  // a prompt chunk before the last
      ++r.generated;
      RequestStats& st = r.record.stats;
      if (r.generated == 1) st.first_token = now;
      if (r.generated >= r.max_new) {
        st.finish = now;
        st.generated_tokens = r.generated;
        st.preemptions = q.preemptions;
        r.record.lane = lane;
        scheduler.remove(&q);
      } else {
        ++q.known;
      }
    }
  }
}

}  // namespace

std::vector<RequestRecord> simulate_workload(const ModelShapes& shapes, const DeviceProfile& device,
                                             const std::vector<SimPartition>& partitions, const std::vector<std::string>& targets,
                                             const std::vector<WorkloadRequest>& workload, std::uint64_t seed, double concentration) {
  std::vector<Request> requests(workload.size());
  std::vector<std::vector<Request*>> lanes(partitions.size());
  for (std::size_t i = 0; i < workload.size(); ++i) {
    const WorkloadRequest& w = workload[i];
    const auto t = std::find(targets.begin(), targets.end(), w.target);
    if (t == targets.end()) throw InvalidArgument("simulated run", "target '" + w.target + "'", "is not a variant being served");
    const int target = static_cast<int>(t - targets.begin());
    std::size_t lane = partitions.size();
    for (std::size_t k = 0; k < partitions.size(); ++k)
      if (std::find(partitions[k].serves.begin(), partitions[k].serves.end(), target) != partitions[k].serves.end()) lane = k;
    if (lane == partitions.size()) throw InvalidArgument("simulated run", "target '" + w.target + "'", "is served by no partition");
    if (w.prompt.empty() || w.max_new_tokens < 1)
      throw InvalidArgument("simulated run", "request " + std::to_string(i + 1), "needs a prompt and at least one token to generate");
    Request& r = requests[i];
    r.index = i;
    r.target = target;
    r.max_new = w.max_new_tokens;
    const auto prompt = static_cast<std::int64_t>(w.prompt.size());
    r.state = {.order = i, .arrival = w.arrival, .set = partitions[lane].set_of[static_cast<std::size_t>(target)], .known = prompt,
               .total = prompt + w.max_new_tokens};
    r.record.index = static_cast<std::int64_t>(i);
    r.record.target = w.target;
    r.record.stats.arrival = w.arrival;
    r.record.stats.prompt_tokens = prompt;
    r.record.stats.counters.layers.resize(static_cast<std::size_t>(shapes.spec.num_layers));
    lanes[lane].push_back(&r);
  }
  for (std::size_t k = 0; k < partitions.size(); ++k) {
    std::stable_sort(lanes[k].begin(), lanes[k].end(), [](const Request* a, const Request* b) { return a->state.arrival < b->state.arrival; });
    simulate_lane(shapes, device, partitions[k], k, requests, lanes[k], seed, concentration);
  }
  std::vector<RequestRecord> out;
  out.reserve(requests.size());
  for (Request& r : requests) out.push_back(std::move(r.record));
  return out;
}

}  // namespace mosaic
