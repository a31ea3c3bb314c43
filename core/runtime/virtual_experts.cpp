#include "runtime/virtual_experts.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "common/error.h"
#include "runtime/reroute_table.h"
#include "runtime/slot_pool.h"

namespace mosaic {

void check_virtual_config(const VirtualConfig& v, const ModelSpec& spec) {
  auto bad = [](const std::string& field, const std::string& problem) { throw InvalidArgument("runtime", field, problem); };
  if (v.update_every < 1) bad("virtual experts' update interval", "must be at least 1 step");
  if (v.staging < 0 || v.staging > spec.num_experts)
    bad("virtual experts' staging slots", "must be from 0 to the layer's " + std::to_string(spec.num_experts) + " experts, not " + std::to_string(v.staging));
  if (!(v.decay > 0.0 && v.decay <= 1.0)) bad("virtual experts' decay", "must be in (0, 1]");
  if (!(v.shift > 0.0 && v.shift <= 1.0)) bad("virtual experts' shift", "must be in (0, 1]");
}

VirtualExperts::VirtualExperts(const VirtualConfig& config, const HostStore& store, HitPolicy hit, Backend& backend,
                               std::vector<SlotPool*> pools, std::vector<RerouteTable*> tables)
    : config_(config),
      store_(store),
      hit_(hit),
      backend_(backend),
      pools_(std::move(pools)),
      tables_(std::move(tables)),
      importance_(store),
      priced_(backend.device_seconds().has_value()) {
  staging_.resize(pools_.size());
  for (std::size_t l = 0; l < pools_.size(); ++l) {
    if (!pools_[l]) continue;
    const std::int64_t first = pools_[l]->count(SlotPool::Role::Pinned);
    for (std::int64_t s = first; s < first + pools_[l]->count(SlotPool::Role::Spare); ++s) staging_[l].push_back(static_cast<std::int32_t>(s));
  }
}

VirtualExperts::~VirtualExperts() {
  if (copier_.joinable()) copier_.join();
}

void VirtualExperts::before_step() {
  if (pending_.empty()) return;
  if (copied_.load(std::memory_order_acquire) && backend_.copies_landed())
    commit();
  else
    ++stats_.steps_overlapped;
}

void VirtualExperts::after_step() {
  importance_.decay(config_.decay);
  ++since_update_;
  if (!pending_.empty() || !due()) return;
  std::vector<Swap> swaps = choose();
  since_update_ = 0;
  if (swaps.empty()) return;
  pending_ = std::move(swaps);
  copied_.store(false, std::memory_order_relaxed);
  // A priced device's copies are queued on its own link, behind the steps, and a device's that queues
  // them on its copy engine (CUDA's) too: no thread needed.
  if (!config_.asynchronous || priced_ || backend_.queues_copies()) {
    copy(pending_);
    return;
  }
  if (copier_.joinable()) copier_.join();
  try {
    copier_ = std::thread([this] { copy(pending_); });
  } catch (...) {
    pending_.clear();  // nothing was copied: no update to commit, the next one may try again
    throw;
  }
}

void VirtualExperts::settle() {
  if (!pending_.empty()) commit();  // which joins the copy thread first
}

void VirtualExperts::copy(const std::vector<Swap>& swaps) {
  const auto t0 = std::chrono::steady_clock::now();
  if (priced_) copies_began_ = *backend_.device_seconds();
  try {
    std::uint64_t bytes = 0;
    for (const Swap& s : swaps) bytes += backend_.copy_behind(s.layer, {false, s.in}, s.content).bytes;
    pending_bytes_ = bytes;
  } catch (...) {
    copy_error_ = std::current_exception();
  }
  pending_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  copies_queued_at_ = t0;
  copied_.store(true, std::memory_order_release);
}

bool VirtualExperts::due() const {
  if (config_.staging < 1) return false;
  if (since_update_ >= config_.update_every) return true;
  // Sooner when the traffic has moved: a layer whose importance lies mostly outside its set.
  for (std::size_t l = 0; l < pools_.size(); ++l) {
    if (!pools_[l]) continue;
    double inside = 0, total = 0;
    const RerouteTable& table = *tables_[l];
    for (int r = 0; r < table.targets(); ++r)
      for (std::int64_t e = 0; e < table.experts(); ++e) {
        const double x = importance_.score(static_cast<std::int64_t>(l), r, e);
        total += x;
        if (table.at(r, e) != RerouteTable::kMiss) inside += x;
      }
    if (total > 0 && (total - inside) / total > config_.shift) return true;
  }
  return false;
}

std::vector<VirtualExperts::Swap> VirtualExperts::choose() {
  std::vector<Swap> out;
  for (std::size_t li = 0; li < pools_.size(); ++li) {
    if (!pools_[li] || staging_[li].empty()) continue;
    const auto l = static_cast<std::int64_t>(li);
    const SlotPool& pool = *pools_[li];
    const RerouteTable& table = *tables_[li];
    // Each distinct expert's importance: the sum over the rows that route to it.
    struct Candidate {
      double score = 0;
      ExpertSource source;
      std::int32_t slot = -1;  // resident in, or -1
    };
    std::map<ExpertId, Candidate> candidates;
    for (int r = 0; r < table.targets(); ++r)
      for (std::int64_t e = 0; e < table.experts(); ++e) {
        const ExpertId id = store_.expert(r, l, e);
        auto [it, fresh] = candidates.try_emplace(id);
        if (fresh) it->second.source = store_.source(r, l, e);
        it->second.score += importance_.score(l, r, e);
      }
    std::int64_t resident = 0;
    for (std::int64_t s = 0; s < pool.size(); ++s)
      if (std::find(staging_[li].begin(), staging_[li].end(), s) == staging_[li].end() && pool.content(s) >= 0) {
        candidates[pool.content(s)].slot = static_cast<std::int32_t>(s);
        ++resident;
      }
    // The set the importance asks for: the `resident` most important, ties kept as they are.
    std::vector<std::pair<ExpertId, Candidate>> ranked(candidates.begin(), candidates.end());
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      if (a.second.score != b.second.score) return a.second.score > b.second.score;
      return (a.second.slot >= 0) > (b.second.slot >= 0);
    });
    std::vector<std::pair<ExpertId, Candidate>> in, out_of;
    for (std::size_t i = 0; i < ranked.size(); ++i) {
      const bool wanted = static_cast<std::int64_t>(i) < resident;
      if (wanted && ranked[i].second.slot < 0) in.push_back(ranked[i]);
      if (!wanted && ranked[i].second.slot >= 0) out_of.push_back(ranked[i]);
    }
    std::reverse(out_of.begin(), out_of.end());  // least important first
    // Each row keeps at least the top-k its router picks: an idle variant's experts lose importance
    // but never all of a layer's slots. Rows' counts as the swaps so far leave them.
    const std::int64_t floor = store_.spec().top_k;
    std::vector<std::int64_t> count(static_cast<std::size_t>(table.targets()), 0);
    for (int r = 0; r < table.targets(); ++r)
      for (std::int64_t e = 0; e < table.experts(); ++e) count[static_cast<std::size_t>(r)] += table.at(r, e) != RerouteTable::kMiss;
    std::vector<char> taken(out_of.size(), 0);
    std::size_t staged = 0;
    for (std::size_t i = 0; i < in.size() && staged < staging_[li].size(); ++i) {
      const ExpertSource& src = in[i].second.source;
      auto gains = [&](int r) { return store_.expert(r, l, src.expert) == in[i].first && table.at(r, src.expert) == RerouteTable::kMiss; };
      for (std::size_t j = 0; j < out_of.size(); ++j) {
        if (taken[j]) continue;
        const std::int32_t slot = out_of[j].second.slot;
        bool keeps_floor = true;
        for (int r = 0; r < table.targets() && keeps_floor; ++r)
          if (table.at(r, pool.source(slot).expert) == slot && !gains(r)) keeps_floor = count[static_cast<std::size_t>(r)] - 1 >= floor;
        if (!keeps_floor) continue;
        for (int r = 0; r < table.targets(); ++r) {
          if (table.at(r, pool.source(slot).expert) == slot) --count[static_cast<std::size_t>(r)];
          if (gains(r)) ++count[static_cast<std::size_t>(r)];
        }
        taken[j] = 1;
        out.push_back({l, slot, staging_[li][staged++], src, in[i].first});
        break;
      }
    }
  }
  return out;
}

void VirtualExperts::commit() {
  if (copier_.joinable()) copier_.join();
  std::vector<Swap> swaps = std::move(pending_);
  pending_.clear();
  if (copy_error_) std::rethrow_exception(std::exchange(copy_error_, nullptr));
  // Swapped in before a step found them landed (settle): the next step must not read a slot under way.
  backend_.await_copies();
  for (const Swap& s : swaps) {
    const auto li = static_cast<std::size_t>(s.layer);
    SlotPool& pool = *pools_[li];
    const std::int64_t gone = pool.source(s.out).expert;
    pool.fill(s.in, s.source, s.content);
    pool.clear(s.out);
    auto& free = staging_[li];
    free.erase(std::find(free.begin(), free.end(), s.in));
    free.push_back(s.out);
    point_rows(s.layer, gone);
    point_rows(s.layer, s.source.expert);
  }
  ++stats_.updates;
  stats_.swapped += static_cast<std::int64_t>(swaps.size());
  stats_.bytes += pending_bytes_;
  // On a priced device: from the copies' start to the step boundary at which they had landed.
  // Copies a device queued: from their start to the step boundary that found them landed (at most that).
  stats_.copy_seconds += priced_                    ? *backend_.device_seconds() - copies_began_
                         : backend_.queues_copies() ? std::chrono::duration<double>(std::chrono::steady_clock::now() - copies_queued_at_).count()
                                                    : pending_seconds_;
}

// Every row's entry for one expert, from what the layer's slots hold now: the row's own copy, or
// under consolidated hits any copy of that position; else none (masked).
void VirtualExperts::point_rows(std::int64_t layer, std::int64_t expert) {
  const auto li = static_cast<std::size_t>(layer);
  const SlotPool& pool = *pools_[li];
  RerouteTable& table = *tables_[li];
  for (int r = 0; r < table.targets(); ++r) {
    const ExpertId want = store_.expert(r, layer, expert);
    std::int32_t exact = RerouteTable::kMiss, any = RerouteTable::kMiss;
    for (std::int64_t s = 0; s < pool.size(); ++s) {
      if (pool.content(s) < 0) continue;
      if (pool.content(s) == want && exact == RerouteTable::kMiss) exact = static_cast<std::int32_t>(s);
      if (pool.source(s).expert == expert && any == RerouteTable::kMiss) any = static_cast<std::int32_t>(s);
    }
    table.set(r, expert, exact != RerouteTable::kMiss ? exact : hit_ == HitPolicy::Consolidated ? any : RerouteTable::kMiss);
  }
}

std::vector<std::vector<bool>> VirtualExperts::allowed(int row) const {
  const ModelSpec& s = store_.spec();
  std::vector<std::vector<bool>> out(static_cast<std::size_t>(s.num_layers), std::vector<bool>(static_cast<std::size_t>(s.num_experts), true));
  for (std::size_t l = 0; l < tables_.size(); ++l)
    if (tables_[l])
      for (std::int64_t e = 0; e < s.num_experts; ++e) out[l][static_cast<std::size_t>(e)] = tables_[l]->at(row, e) != RerouteTable::kMiss;
  return out;
}

}  // namespace mosaic
