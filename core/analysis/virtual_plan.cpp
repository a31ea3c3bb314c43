#include "analysis/virtual_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "common/byte_size.h"
#include "common/error.h"
#include "runtime/device_plan.h"
#include "runtime/engine.h"
#include "runtime/forward.h"
#include "runtime/miss_policy.h"
#include "runtime/perplexity.h"

namespace mosaic {
namespace {

using Allowed = std::vector<std::vector<bool>>;

// The calibration windows, as perplexity() spreads them.
struct Calibration {
  std::span<const std::int64_t> ids;
  std::int64_t window = 0, max_windows = 0;
};

// How many windows perplexity() scores: every whole one, or at most max_windows (> 0) of them.
std::int64_t windows_of(const Calibration& c) {
  const std::int64_t available = static_cast<std::int64_t>(c.ids.size()) / c.window;
  return c.max_windows > 0 ? std::min(available, c.max_windows) : available;
}

// Mean NLL per token of `model` on the calibration text, the router masked to `allowed` (null: not).
double mean_nll(const Model& model, const Calibration& c, const Allowed* allowed) {
  return perplexity(c.ids, c.window, c.max_windows, [&](const std::vector<std::span<const std::int64_t>>& windows) {
           // One batched forward over every window.
           std::vector<std::int64_t> ids;
           for (const auto& w : windows) ids.insert(ids.end(), w.begin(), w.end());
           KvCache cache(model.spec(), static_cast<std::int64_t>(windows.size()), c.window);
           const Logits all = forward(model, cache, ids, LogitsFor::AllPositions, allowed);
           std::vector<Logits> out(windows.size());
           const auto per = static_cast<std::size_t>(c.window * all.vocab);
           for (std::size_t w = 0; w < windows.size(); ++w) {
             out[w].rows = c.window;
             out[w].vocab = all.vocab;
             out[w].values.assign(all.values.begin() + static_cast<std::ptrdiff_t>(w * per),
                                  all.values.begin() + static_cast<std::ptrdiff_t>((w + 1) * per));
           }
           return out;
         })
      .mean_nll;
}

// SwapMoE's importance of every expert of `target` over the calibration windows, as the runtime
// measures it while serving: [layers * experts].
std::vector<double> calibration_importance(const HostStore& store, int target, const Calibration& c) {
  const ModelSpec& s = store.spec();
  RuntimeConfig config{.pinned = every_position(s, target), .hit = HitPolicy::Strict, .miss = "masked",
                       .virtual_experts = VirtualConfig{.update_every = std::numeric_limits<std::int32_t>::max(), .decay = 1.0, .staging = 0}};
  config.reserve.miss_slots = 0;
  auto runtime = std::make_shared<Runtime>(store, config);
  std::vector<ServeRequest> requests;
  const std::int64_t count = windows_of(c);
  for (std::int64_t w = 0; w < count; ++w) {
    const auto start = static_cast<std::ptrdiff_t>((w * (static_cast<std::int64_t>(c.ids.size()) / c.window) / count) * c.window);
    requests.push_back({store.name(target), {.prompt = {c.ids.begin() + start, c.ids.begin() + start + c.window}, .max_new_tokens = 0}, true});
  }
  {
    Engine engine(runtime);
    for (const auto& h : engine.submit_all(std::move(requests)))
      if (const RequestResult& r = h->wait(); r.finish == Finish::Failed) throw InvalidArgument("plan-virtual", "calibration", r.error);
  }
  std::vector<double> out(static_cast<std::size_t>(s.num_layers * s.num_experts), 0.0);
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l); ++e)
      out[static_cast<std::size_t>(l * s.num_experts + e)] = runtime->virtual_experts()->importance().score(l, target, e);
  return out;
}

// Per layer, experts from the most important down (ties by id).
std::vector<std::vector<std::int64_t>> importance_order(const ModelSpec& s, const std::vector<double>& importance) {
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(s.num_layers));
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    auto& o = out[static_cast<std::size_t>(l)];
    o.resize(static_cast<std::size_t>(s.num_experts));
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](std::int64_t a, std::int64_t b) {
      return importance[static_cast<std::size_t>(l * s.num_experts + a)] > importance[static_cast<std::size_t>(l * s.num_experts + b)];
    });
  }
  return out;
}

Allowed every_expert(const ModelSpec& s) {
  return Allowed(static_cast<std::size_t>(s.num_layers), std::vector<bool>(static_cast<std::size_t>(s.num_experts), true));
}

// Layer l masked to the first counts[l] of `order` (dense layers and counts of 0: untouched).
Allowed masked_to(const ModelSpec& s, const std::vector<std::vector<std::int64_t>>& order, const std::vector<std::int64_t>& counts) {
  Allowed a = every_expert(s);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const std::int64_t c = counts[static_cast<std::size_t>(l)];
    if (!s.is_sparse(l) || c == 0) continue;
    auto& row = a[static_cast<std::size_t>(l)];
    std::fill(row.begin(), row.end(), false);
    for (std::int64_t i = 0; i < c; ++i) row[static_cast<std::size_t>(order[static_cast<std::size_t>(l)][static_cast<std::size_t>(i)])] = true;
  }
  return a;
}


void refuse_deltas(const HostStore& store) {
  for (int t = 0; t < store.targets(); ++t)
    if (store.is_delta(t))
      throw InvalidArgument("plan-virtual", "variant '" + store.name(t) + "'", "is a delta folder: virtual experts swap whole experts",
                            "serve delta folders with the delta or hybrid strategy, or plan without them");
}

ReserveSpec masked_reserve(const VirtualPlanOptions& o) {
  ReserveSpec r = o.reserve;
  r.miss_slots = 0;  // masked gating never loads
  return r;
}

// What the budget holds beside the experts: one non-expert set, the reserve, the staging slots.
std::uint64_t fixed_bytes(const HostStore& store, const VirtualPlanOptions& o) {
  RuntimeConfig priced{.miss = "masked", .reserve = masked_reserve(o), .virtual_experts = o.updates};
  return plan_device(store, priced, *make_miss_policy("masked")).budget.used();
}

[[noreturn]] void below_minimum(std::uint64_t budget, std::uint64_t fixed, std::int64_t least, std::uint64_t slot, std::int64_t k) {
  const std::uint64_t minimum = fixed + static_cast<std::uint64_t>(least) * slot;
  throw BudgetError("budget", format_bytes(budget),
                    "is below virtual experts' minimum of " + format_bytes(minimum) + " (" + std::to_string(minimum) +
                        " bytes): non-expert weights, reserve and staging slots " + format_bytes(fixed) + ", and top-" + std::to_string(k) +
                        " experts per layer of every variant, " + std::to_string(least) + " × " + format_bytes(slot),
                    "raise the budget, reserve less, or use fewer staging slots");
}

// The layout of `counts` (per layer): each variant's first counts[l] experts of `order[v][l]` as its
// initial set, the map showing them, positions ranked by `importance` (summed over the variants).
Layout virtual_layout(const Family& family, const std::vector<std::string>& sha256, const HostStore& store, const std::vector<int>& target,
                      const std::vector<std::vector<std::vector<std::int64_t>>>& order, const std::vector<std::int64_t>& counts,
                      const std::vector<double>& importance, const VirtualPlanOptions& options, const ExpertDistances* distances) {
  const ModelSpec& s = store.spec();
  VirtualLayout vl;
  vl.staging = options.updates.staging;
  vl.update_every = options.updates.update_every;
  vl.decay = options.updates.decay;
  vl.shift = options.updates.shift;
  vl.counts = counts;
  ConsolidationPlan p;
  p.layers = s.num_layers;
  p.experts = s.num_experts;
  p.variants = static_cast<std::int64_t>(family.size());
  p.policy = Policy::Virtual;
  p.map.assign(static_cast<std::size_t>(s.num_layers * s.num_experts), -1);
  p.rank.assign(p.map.size(), -1);
  p.distance = distances ? distances->position : std::vector<double>(p.map.size(), std::nan(""));
  vl.initial.resize(static_cast<std::size_t>(s.num_layers));
  std::vector<std::int64_t> positions;
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    if (!s.is_sparse(l)) continue;
    std::set<ExpertId> distinct;
    for (std::size_t v = 0; v < family.size(); ++v)
      for (std::int64_t j = 0; j < counts[static_cast<std::size_t>(l)]; ++j) {
        const std::int64_t e = order[v][static_cast<std::size_t>(l)][static_cast<std::size_t>(j)];
        vl.initial[static_cast<std::size_t>(l)].emplace_back(static_cast<int>(v), e);
        distinct.insert(store.expert(target[v], l, e));
        int& cell = p.map[static_cast<std::size_t>(l * s.num_experts + e)];
        if (cell < 0) cell = static_cast<int>(v);
      }
    p.capacity += static_cast<std::int64_t>(distinct.size());
    for (std::int64_t e = 0; e < s.num_experts; ++e) positions.push_back(l * s.num_experts + e);
  }
  std::stable_sort(positions.begin(), positions.end(), [&](std::int64_t a, std::int64_t b) {
    return importance[static_cast<std::size_t>(a)] > importance[static_cast<std::size_t>(b)];
  });
  for (std::size_t r = 0; r < positions.size(); ++r) p.rank[static_cast<std::size_t>(positions[r])] = static_cast<std::int64_t>(r);
  Layout layout = make_layout(family, sha256, std::move(p));  // variants named and located as consolidate's
  layout.virtual_experts = std::move(vl);
  layout.budget_bytes = options.budget_bytes ? std::optional<std::uint64_t>(options.budget_bytes) : std::nullopt;
  layout.reserve = plan_reserve(s, store.expert_bytes() + store.max_delta_bytes(), masked_reserve(options));
  layout.reserve_spec = masked_reserve(options);
  // Priced as the runtime will charge it: a plan that did not fit would be a planner bug.
  if (options.budget_bytes) {
    RuntimeConfig check{.budget_bytes = options.budget_bytes, .reserve = options.reserve};
    apply_virtual_layout(check, layout, target, store);
    plan_device(store, check, *make_miss_policy("masked"));
  }
  return layout;
}

}  // namespace

std::vector<std::size_t> plan_counts(const std::vector<std::vector<std::int64_t>>& slots, const std::vector<std::vector<double>>& loss,
                                     std::int64_t available) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  std::int64_t least = 0, most = 0;
  for (const auto& options : slots) {
    least += *std::min_element(options.begin(), options.end());
    most += *std::max_element(options.begin(), options.end());
  }
  if (least > available)
    throw BudgetError("budget", std::to_string(available) + " expert slots", "cannot hold the " + std::to_string(least) + " the smallest counts need",
                      "raise the budget");
  const std::int64_t cap = std::min(available, most);
  // best[n]: the least summed loss of the layers so far using exactly n slots; pick[l][n] its choice.
  std::vector<double> best(static_cast<std::size_t>(cap + 1), kNone);
  best[0] = 0;
  std::vector<std::vector<std::size_t>> pick(slots.size(), std::vector<std::size_t>(static_cast<std::size_t>(cap + 1), 0));
  for (std::size_t l = 0; l < slots.size(); ++l) {
    std::vector<double> next(best.size(), kNone);
    for (std::int64_t n = 0; n <= cap; ++n) {
      if (best[static_cast<std::size_t>(n)] == kNone) continue;
      for (std::size_t o = 0; o < slots[l].size(); ++o) {
        const std::int64_t m = n + slots[l][o];
        if (m > cap) continue;
        const double x = best[static_cast<std::size_t>(n)] + loss[l][o];
        if (x < next[static_cast<std::size_t>(m)]) {
          next[static_cast<std::size_t>(m)] = x;
          pick[l][static_cast<std::size_t>(m)] = o;
        }
      }
    }
    best = std::move(next);
  }
  std::int64_t at = -1;
  for (std::int64_t n = 0; n <= cap; ++n)
    if (best[static_cast<std::size_t>(n)] != kNone && (at < 0 || best[static_cast<std::size_t>(n)] <= best[static_cast<std::size_t>(at)])) at = n;
  if (at < 0) throw InvalidArgument("planner", "losses", "are not finite numbers", "check the calibration text and the checkpoints");
  std::vector<std::size_t> out(slots.size());
  for (std::size_t l = slots.size(); l-- > 0;) {
    out[l] = pick[l][static_cast<std::size_t>(at)];
    at -= slots[l][out[l]];
  }
  return out;
}

VirtualCurves measure_virtual(const Family& family, const HostStore& store, std::span<const std::int64_t> calibration, std::int64_t window,
                              std::int64_t max_windows) {
  const ModelSpec& s = store.spec();
  refuse_deltas(store);
  if (window < 2 || static_cast<std::int64_t>(calibration.size()) < window)
    throw InvalidArgument("plan-virtual", "calibration text",
                          "holds " + std::to_string(calibration.size()) + " tokens, fewer than one window of " + std::to_string(window),
                          "give a longer text or a smaller --window");
  VirtualCurves c;
  c.calibration.assign(calibration.begin(), calibration.end());
  c.window = window;
  c.max_windows = max_windows;
  const Calibration cal{c.calibration, window, max_windows};
  const std::int64_t k = s.top_k;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (s.is_sparse(l)) c.sparse.push_back(l);
  if (c.sparse.empty()) throw InvalidArgument("plan-virtual", "model", "has no MoE layer: there are no experts to keep resident");

  // Per variant: its importance on the text, and the NLL rise of every (layer, count).
  const auto V = family.size();
  const std::vector<int> target = store.indices(family);
  c.order.resize(V);
  c.importance.assign(static_cast<std::size_t>(s.num_layers * s.num_experts), 0.0);
  c.rise.assign(c.sparse.size(), std::vector<double>(static_cast<std::size_t>(s.num_experts - k + 1), 0.0));
  for (std::size_t v = 0; v < V; ++v) {
    const std::vector<double> importance = calibration_importance(store, target[v], cal);
    for (std::size_t i = 0; i < importance.size(); ++i) c.importance[i] += importance[i];
    c.order[v] = importance_order(s, importance);
    const auto model = Model::load(*family.variants()[v].checkpoint);
    const double base = mean_nll(*model, cal, nullptr);
    c.full_nll += base / static_cast<double>(V);
    for (std::size_t i = 0; i < c.sparse.size(); ++i)
      for (std::int64_t n = k; n <= s.num_experts; ++n) {
        std::vector<std::int64_t> counts(static_cast<std::size_t>(s.num_layers), 0);
        counts[static_cast<std::size_t>(c.sparse[i])] = n;
        const Allowed a = masked_to(s, c.order[v], counts);
        const double x = n == s.num_experts ? base : mean_nll(*model, cal, &a);
        c.rise[i][static_cast<std::size_t>(n - k)] += (x - base) / static_cast<double>(V);
      }
  }
  // Slots a count takes: the distinct experts of every variant's top n (adapters share their base's).
  c.slots.resize(c.sparse.size());
  for (std::size_t i = 0; i < c.sparse.size(); ++i)
    for (std::int64_t n = k; n <= s.num_experts; ++n) {
      std::set<ExpertId> distinct;
      for (std::size_t v = 0; v < V; ++v)
        for (std::int64_t j = 0; j < n; ++j)
          distinct.insert(store.expert(target[v], c.sparse[i], c.order[v][static_cast<std::size_t>(c.sparse[i])][static_cast<std::size_t>(j)]));
      c.slots[i].push_back(static_cast<std::int64_t>(distinct.size()));
    }
  return c;
}

Layout plan_virtual(const Family& family, const std::vector<std::string>& sha256, const HostStore& store, const VirtualCurves& curves,
                    const VirtualPlanOptions& options, const ExpertDistances* distances, bool uniform_only) {
  const ModelSpec& s = store.spec();
  check_virtual_config(options.updates, s);
  const std::uint64_t fixed = fixed_bytes(store, options), slot = store.expert_bytes();
  const std::int64_t k = s.top_k;
  const auto& sparse = curves.sparse;
  const auto& rise = curves.rise;
  const auto& slots = curves.slots;
  const auto V = family.size();
  std::int64_t least = 0;
  for (const auto& o : slots) least += o.front();
  if (options.budget_bytes < fixed + static_cast<std::uint64_t>(least) * slot) below_minimum(options.budget_bytes, fixed, least, slot, k);
  const auto available = static_cast<std::int64_t>((options.budget_bytes - fixed) / slot);

  // Uniform: the most experts per layer the same slots hold.
  std::size_t uniform = 0;
  for (std::size_t o = 0; o < rise.front().size(); ++o) {
    std::int64_t used = 0;
    for (const auto& x : slots) used += x[o];
    if (used <= available) uniform = o;
  }
  // A budget that holds every expert of every layer leaves nothing to plan: all are resident, though
  // masking some may have scored a little lower on the calibration text (its noise, not a gain).
  std::int64_t most = 0;
  for (const auto& o : slots) most += o.back();
  std::vector<std::size_t> all(sparse.size());
  for (std::size_t i = 0; i < sparse.size(); ++i) all[i] = slots[i].size() - 1;
  const std::vector<std::size_t> choice = uniform_only ? std::vector<std::size_t>(sparse.size(), uniform)
                                          : most <= available ? all
                                                              : plan_counts(slots, rise, available);

  std::vector<std::int64_t> counts(static_cast<std::size_t>(s.num_layers), 0);
  VirtualLayout::Planner pl;
  pl.first_count = k;
  pl.full_nll = curves.full_nll;
  pl.loss.assign(static_cast<std::size_t>(s.num_layers), {});
  for (std::size_t i = 0; i < sparse.size(); ++i) {
    pl.loss[static_cast<std::size_t>(sparse[i])] = rise[i];
    counts[static_cast<std::size_t>(sparse[i])] = k + static_cast<std::int64_t>(choice[i]);
    pl.objective += rise[i][choice[i]];
  }
  pl.uniform_count = k + static_cast<std::int64_t>(uniform);
  for (const auto& r : rise) pl.uniform_objective += r[uniform];
  std::vector<std::int64_t> uniform_counts(static_cast<std::size_t>(s.num_layers), 0);
  for (std::int64_t l : sparse) uniform_counts[static_cast<std::size_t>(l)] = pl.uniform_count;
  // The sum of single-layer rises is the objective; the chosen and the uniform counts are measured
  // with every layer masked at once.
  const Calibration cal{curves.calibration, curves.window, curves.max_windows};
  for (std::size_t v = 0; v < V; ++v) {
    const auto model = Model::load(*family.variants()[v].checkpoint);
    const Allowed planned = masked_to(s, curves.order[v], counts), even = masked_to(s, curves.order[v], uniform_counts);
    pl.planned_nll += mean_nll(*model, cal, &planned) / static_cast<double>(V);
    pl.uniform_nll += uniform_only ? 0.0 : mean_nll(*model, cal, &even) / static_cast<double>(V);
  }
  if (uniform_only) pl.uniform_nll = pl.planned_nll;
  pl.calibration_tokens = windows_of(cal) * curves.window;
  Layout layout = virtual_layout(family, sha256, store, store.indices(family), curves.order, counts, curves.importance, options, distances);
  layout.virtual_experts->planner = std::move(pl);
  return layout;
}

Layout plan_virtual(const Family& family, const std::vector<std::string>& sha256, const HostStore& store,
                    std::span<const std::int64_t> calibration, const VirtualPlanOptions& options, const ExpertDistances* distances) {
  // Before measuring: a budget below top-k per layer is refused at once (variants may share experts,
  // never hold fewer).
  refuse_deltas(store);
  const ModelSpec& s = store.spec();
  check_virtual_config(options.updates, s);
  const std::uint64_t fixed = fixed_bytes(store, options), slot = store.expert_bytes();
  const std::int64_t least = s.top_k * s.num_sparse_layers();
  if (options.budget_bytes < fixed + static_cast<std::uint64_t>(least) * slot) below_minimum(options.budget_bytes, fixed, least, slot, s.top_k);
  return plan_virtual(family, sha256, store, measure_virtual(family, store, calibration, options.window, options.max_windows), options, distances);
}

std::int64_t uniform_virtual_count(const ModelSpec& spec, std::int64_t capacity, std::int64_t variants) {
  return std::clamp<std::int64_t>(capacity / std::max<std::int64_t>(1, spec.num_sparse_layers() * variants), spec.top_k, spec.num_experts);
}

Layout uniform_virtual_layout(const Family& family, const std::vector<std::string>& sha256, const HostStore& store, std::int64_t capacity,
                              std::optional<std::uint64_t> budget, const VirtualPlanOptions& options, const ExpertDistances* distances) {
  const ModelSpec& s = store.spec();
  refuse_deltas(store);
  check_virtual_config(options.updates, s);
  const std::int64_t k = s.top_k, sparse = s.num_sparse_layers();
  const auto V = static_cast<std::int64_t>(family.size());
  VirtualPlanOptions o = options;
  o.budget_bytes = budget.value_or(0);
  std::int64_t count = s.num_experts;
  if (capacity > 0) {
    count = uniform_virtual_count(s, capacity, V);
  } else if (budget) {
    // Every variant's experts counted apart: adapters sharing their base's only leave room unused.
    const std::uint64_t fixed = fixed_bytes(store, o), slot = store.expert_bytes();
    if (*budget < fixed + static_cast<std::uint64_t>(k * sparse * V) * slot) below_minimum(*budget, fixed, k * sparse * V, slot, k);
    count = std::min<std::int64_t>(s.num_experts, static_cast<std::int64_t>((*budget - fixed) / slot) / std::max<std::int64_t>(1, sparse * V));
  }
  std::vector<std::int64_t> counts(static_cast<std::size_t>(s.num_layers), 0);
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (s.is_sparse(l)) counts[static_cast<std::size_t>(l)] = count;
  std::vector<std::int64_t> first(static_cast<std::size_t>(s.num_experts));
  std::iota(first.begin(), first.end(), 0);
  const std::vector<std::vector<std::vector<std::int64_t>>> order(family.size(),
                                                                   std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(s.num_layers), first));
  return virtual_layout(family, sha256, store, store.indices(family), order, counts,
                        std::vector<double>(static_cast<std::size_t>(s.num_layers * s.num_experts), 0.0), o, distances);
}

void apply_virtual_layout(RuntimeConfig& config, const Layout& layout, const std::vector<int>& to_store, const HostStore& store) {
  if (!layout.virtual_experts) throw InvalidArgument("layout", "policy '" + std::string(policy_name(layout.plan.policy)) + "'", "is not a virtual-experts layout");
  const VirtualLayout& v = *layout.virtual_experts;
  const ModelSpec& s = store.spec();
  if (static_cast<std::int64_t>(v.counts.size()) != s.num_layers)
    throw MismatchError("layout", "field 'virtual.counts'", "has " + std::to_string(v.counts.size()) + " layers; the model has " + std::to_string(s.num_layers),
                        "plan it again for these variants with mosaic-cli plan-virtual");
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const std::int64_t c = v.counts[static_cast<std::size_t>(l)];
    if (s.is_sparse(l) ? c < s.top_k : c != 0)
      throw MismatchError("layout", "field 'virtual.counts[" + std::to_string(l) + "]'",
                          "is " + std::to_string(c) + (s.is_sparse(l) ? ", fewer than the " + std::to_string(s.top_k) + " experts the router picks per token"
                                                                       : " in a dense layer, which has no experts"),
                          "plan it again for these variants with mosaic-cli plan-virtual");
  }
  config.pinned.clear();
  for (std::size_t l = 0; l < v.initial.size(); ++l) {
    std::set<ExpertId> pinned;
    for (const auto& [variant, expert] : v.initial[l]) {
      const int t = to_store.at(static_cast<std::size_t>(variant));
      if (pinned.insert(store.expert(t, static_cast<std::int64_t>(l), expert)).second) config.pinned.push_back({static_cast<std::int64_t>(l), expert, t});
    }
  }
  config.hit = HitPolicy::Strict;
  config.miss = "masked";
  config.reserve.miss_slots = 0;
  config.virtual_experts = VirtualConfig{.update_every = v.update_every, .shift = v.shift, .decay = v.decay, .staging = v.staging};
}

}  // namespace mosaic
