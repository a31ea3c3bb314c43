#include "runtime/host_store.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <unordered_map>

#include "runtime/capacity.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "common/path_identity.h"
#include "model/dtype_convert.h"
#include "model/weight_names.h"

namespace mosaic {
namespace {

bool expands_to_zero(const PackedDelta& p, const DeltaFormat& f) {
  std::vector<float> dense(static_cast<std::size_t>(p.rows * p.cols));
  expand_delta(p, f, dense);
  for (float v : dense)
    if (v != 0.0f) return false;
  return true;
}

}  // namespace

std::uint64_t HostDelta::bytes() const {  // from the shapes: the same where the packs' arrays are held and where not
  std::uint64_t n = 0;
  for (const PackedDelta* p : {&gate, &up, &down}) n += packed_bytes(format, p->rows, p->cols);
  return n;
}

HostStore::~HostStore() = default;

std::uint64_t HostTensor::size_bytes() const { return dtype_size(dtype) * static_cast<std::uint64_t>(numel()); }

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::unique_ptr<HostStore> HostStore::shapes_of(const HostStore& from) {
  std::unique_ptr<HostStore> s(new HostStore());
  s->spec_ = from.spec_;
  s->targets_ = from.targets_;
  s->tensors_ = from.tensors_;
  s->experts_ = from.experts_;
  s->deltas_ = from.deltas_;
  s->sets_ = from.sets_;
  s->non_expert_names_ = from.non_expert_names_;
  s->host_bytes_ = from.host_bytes_;
  s->non_expert_bytes_ = from.non_expert_bytes_;
  s->expert_bytes_ = from.expert_bytes_;
  s->max_delta_bytes_ = from.max_delta_bytes_;
  s->shapes_only_ = true;
  s->tier_ = std::make_unique<HostTier>(std::nullopt);
  for (HostTensor& t : s->tensors_) {
    t.bytes = {};
    s->tier_->add(t.bytes);
  }
  return s;
}

std::unique_ptr<HostStore> HostStore::of_configs(const ModelSpec& spec, DType dtype, const std::vector<std::string>& names) {
  std::vector<ConfigTarget> targets;
  for (const std::string& name : names) targets.push_back({.name = name});
  return of_configs(spec, dtype, targets);
}

std::unique_ptr<HostStore> HostStore::of_configs(const ModelSpec& spec, DType dtype, const std::vector<ConfigTarget>& targets) {
  std::unique_ptr<HostStore> s(new HostStore());
  s->spec_ = spec;
  s->shapes_only_ = true;
  s->tier_ = std::make_unique<HostTier>(std::nullopt);
  const std::vector<ExpectedTensor> expected = expected_tensors(spec);
  for (const ExpectedTensor& x : expected)
    if (!x.is_expert()) {
      s->non_expert_names_.push_back(x.name);
      s->non_expert_bytes_ += HostTensor{x.name, dtype, x.shape, {}}.size_bytes();
    }
  const auto positions = static_cast<std::size_t>(spec.num_layers * spec.num_experts);
  auto tensor = [&](const ExpectedTensor& x) {
    const auto id = static_cast<TensorId>(s->tensors_.size());
    s->tensors_.push_back({x.name, dtype, x.shape, {}});
    s->tier_->add({});
    s->host_bytes_ += s->tensors_.back().size_bytes();
    return id;
  };
  auto tunes = [](const EsftAdapterConfig& a, std::int64_t layer, std::int64_t expert) {
    const auto it = a.experts.find(layer);
    return it != a.experts.end() && std::find(it->second.begin(), it->second.end(), expert) != it->second.end();
  };
  auto full = [&](int t) { return t >= 0 && static_cast<std::size_t>(t) < targets.size() && !targets[static_cast<std::size_t>(t)].adapter && !targets[static_cast<std::size_t>(t)].delta; };
  s->targets_.resize(targets.size());
  // Full targets first: adapters and delta folders are built over them.
  for (const bool over_pass : {false, true})
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const ConfigTarget& c = targets[i];
      const bool over = c.adapter || c.delta;
      if (over != over_pass) continue;
      const std::string at = "target '" + c.name + "'";
      if (c.adapter && c.delta) throw InvalidArgument("shape-only store", at, "is both an ESFT adapter and a delta folder", "describe it as one");
      if (over ? !full(c.base) : c.base >= 0)
        throw InvalidArgument("shape-only store", at, over ? "is not over a full target of the list" : "names a base but is built on none",
                              "give an adapter or delta folder the index of its full base");
      Target& t = s->targets_[i];
      t.name = c.name;
      t.adapter = c.adapter.has_value();
      t.delta = c.delta.has_value();
      t.base = over ? c.base : -1;
      t.experts.assign(positions, -1);
      const Target* base = over ? &s->targets_[static_cast<std::size_t>(c.base)] : nullptr;
      std::vector<TensorId> set;
      std::vector<HostExpert> experts(positions);
      for (const ExpectedTensor& x : expected) {
        if (!x.is_expert()) {  // a full variant's and a delta folder's own; an adapter's where it tunes them
          const bool own = !c.adapter || adapter_stores(*c.adapter, spec, x);
          set.push_back(own ? tensor(x) : s->sets_[static_cast<std::size_t>(base->set)][set.size()]);
          continue;
        }
        if (over && !(c.adapter && tunes(*c.adapter, x.layer, x.expert))) continue;  // its base's
        HostExpert& e = experts[static_cast<std::size_t>(x.layer * spec.num_experts + x.expert)];
        (x.role == ExpertRole::Gate ? e.gate : x.role == ExpertRole::Up ? e.up : e.down) = tensor(x);
        if (c.adapter) t.tuned.emplace_back(x.layer, x.expert);
      }
      std::sort(t.tuned.begin(), t.tuned.end());
      t.tuned.erase(std::unique(t.tuned.begin(), t.tuned.end()), t.tuned.end());
      for (std::size_t p = 0; p < positions; ++p) {
        HostExpert e = experts[p];
        if (e.gate < 0 && base && base->experts[p] >= 0) {
          if (!c.delta) {  // an adapter's untuned expert is its base's
            t.experts[p] = base->experts[p];
            continue;
          }
          e = s->experts_[static_cast<std::size_t>(base->experts[p])];
          e.dense = base->experts[p];
          e.delta = static_cast<DeltaId>(s->deltas_.size());
          HostDelta d{.format = *c.delta};
          for (auto [pack, id] : {std::pair{&d.gate, e.gate}, std::pair{&d.up, e.up}, std::pair{&d.down, e.down}}) {
            const HostTensor& m = s->tensors_[static_cast<std::size_t>(id)];
            pack->rows = m.shape.at(0);
            pack->cols = m.shape.at(1);
          }
          s->host_bytes_ += d.bytes();
          s->max_delta_bytes_ = std::max(s->max_delta_bytes_, d.bytes());
          s->deltas_.push_back(std::move(d));
        }
        if (e.gate < 0) continue;  // a dense layer
        t.experts[p] = static_cast<ExpertId>(s->experts_.size());
        s->experts_.push_back(e);
      }
      if (base && set == s->sets_[static_cast<std::size_t>(base->set)]) {
        t.set = base->set;
      } else {
        t.set = static_cast<int>(s->sets_.size());
        s->sets_.push_back(std::move(set));
      }
    }
  if (!s->experts_.empty()) {
    const HostExpert& e = s->experts_.front();
    for (TensorId id : {e.gate, e.up, e.down}) s->expert_bytes_ += s->tensors_[static_cast<std::size_t>(id)].size_bytes();
  }
  return s;
}

HostStore::HostStore(const Family& family, std::optional<std::uint64_t> host_budget) : spec_(family.spec()) {
  const ModelSpec& s = spec_;
  const auto positions = static_cast<std::size_t>(s.num_layers * s.num_experts);
  const DeviceBytes device = device_bytes(family);
  non_expert_bytes_ = device.non_expert;
  expert_bytes_ = device.per_expert;
  // The least a budget must hold: one non-expert set (every step reads all of it) and the staging a
  // copy to the device goes through.
  const std::uint64_t minimum = non_expert_bytes_ + 2 * HostTier::kChunk;
  if (host_budget && *host_budget < minimum)
    throw BudgetError("host budget", format_bytes(*host_budget),
                      "is below the minimum of " + format_bytes(minimum) + ": one non-expert set (" + format_bytes(non_expert_bytes_) +
                          ") and the staging chunks (" + format_bytes(2 * HostTier::kChunk) + ")",
                      "raise --host-budget");

  // With a budget every byte is looked at a chunk at a time and its pages given back once done, so
  // that finding the distinct tensors of a family larger than RAM does not fill it.
  auto chunks = [&](std::span<const std::byte> a, auto&& each) {
    for (std::size_t at = 0; at < a.size(); at += HostTier::kChunk) {
      const std::size_t n = std::min(HostTier::kChunk, a.size() - at);
      const bool go_on = each(at, n);
      if (host_budget) HostTier::release(a.subspan(at, n));
      if (!go_on) return false;
    }
    return true;
  };
  auto same_bytes = [&](std::span<const std::byte> a, std::span<const std::byte> b) {
    return a.size() == b.size() && chunks(a, [&](std::size_t at, std::size_t n) {
             const bool same = std::memcmp(a.data() + at, b.data() + at, n) == 0;
             if (host_budget) HostTier::release(b.subspan(at, n));
             return same;
           });
  };
  auto check_finite = [&](const Weight& w) {  // require_finite's refusal, a chunk at a time
    const auto data = w.data();
    chunks(data, [&](std::size_t at, std::size_t n) {
      if (const auto bad = first_non_finite(w.dtype, data.subspan(at, n)))
        throw FormatError(w.file->path().string(), "tensor '" + w.expected.name + "'",
                          "holds NaN or infinity (element " + std::to_string(*bad + at / dtype_size(w.dtype)) + " of " +
                              std::to_string(w.info->numel()) + ")",
                          "the checkpoint is corrupt or was saved after training diverged; re-download or re-save it");
      return true;
    });
  };

  // Distinct tensors per name. Two weights are one tensor when they are the same bytes of the same
  // file (an adapter's untuned tensors are its base's), or compare equal byte for byte. An expert's
  // matrix is compared with every expert's of its layer and role, not only its position's: a
  // within-model delta folder's base repeats the layer's medoid at each expert (analysis/delta_within.h).
  std::unordered_map<std::string, std::vector<TensorId>> by_name;
  // Each distinct tensor's first bytes, kept: most candidates differ there, and are passed over
  // without touching their pages (under a host budget those would be read again, maybe from disk).
  std::vector<std::string> heads;
  auto head_of = [](std::span<const std::byte> data) {
    const std::size_t n = std::min<std::size_t>(data.size(), 64);
    return std::string(reinterpret_cast<const char*>(data.data()), n);
  };
  auto candidates_of = [](const ExpectedTensor& x) {
    return x.is_expert() ? "experts of layer " + std::to_string(x.layer) + ", role " + std::to_string(static_cast<int>(x.role)) : x.name;
  };
  std::map<std::pair<std::string, std::uint64_t>, TensorId> by_location;
  auto intern = [&](const Weight& w) -> TensorId {
    const auto where = std::make_pair(canonical_or_self(w.file->path()).string(), w.info->begin);
    if (const auto it = by_location.find(where); it != by_location.end()) return it->second;
    const auto data = w.data();
    const std::string head = head_of(data);
    auto& same_name = by_name[candidates_of(w.expected)];
    for (TensorId id : same_name) {
      const HostTensor& t = tensors_[static_cast<std::size_t>(id)];
      if (t.dtype == w.dtype && t.shape == w.info->shape && heads[static_cast<std::size_t>(id)] == head && same_bytes(t.bytes, data)) {
        HostTier::release(data);  // a copy: never read again, its pages need not stay, budget or not
        by_location.emplace(where, id);
        return id;
      }
    }
    check_finite(w);  // each distinct tensor once
    const auto id = static_cast<TensorId>(tensors_.size());
    tensors_.push_back({w.expected.name, w.dtype, w.info->shape, data});
    heads.push_back(head);
    host_bytes_ += data.size();
    same_name.push_back(id);
    by_location.emplace(where, id);
    return id;
  };

  std::map<std::vector<TensorId>, int> set_index;
  std::map<std::tuple<TensorId, TensorId, TensorId, DeltaId>, ExpertId> expert_index;
  for (const Variant& v : family.variants()) {
    const Checkpoint& ck = *v.checkpoint;
    Target t;
    t.name = v.name;
    t.adapter = ck.is_adapter();
    t.delta = ck.is_delta();
    t.tuned = ck.adapter_experts();
    t.experts.assign(positions, -1);
    std::vector<TensorId> non_expert;
    std::vector<HostExpert> experts(positions);
    for (const Weight& w : ck.weights()) {
      const TensorId id = intern(w);
      if (!w.expected.is_expert()) {
        if (targets_.empty()) non_expert_names_.push_back(w.expected.name);
        non_expert.push_back(id);
        continue;
      }
      HostExpert& e = experts[static_cast<std::size_t>(w.expected.layer * s.num_experts + w.expected.expert)];
      (w.expected.role == ExpertRole::Gate ? e.gate : w.expected.role == ExpertRole::Up ? e.up : e.down) = id;
      if (ck.is_delta()) {
        if (e.delta < 0) {
          e.delta = static_cast<DeltaId>(deltas_.size());
          deltas_.push_back({.format = ck.delta_format()});
        }
        HostDelta& d = deltas_[static_cast<std::size_t>(e.delta)];
        (w.expected.role == ExpertRole::Gate ? d.gate : w.expected.role == ExpertRole::Up ? d.up : d.down) = ck.delta_pack(w);
      }
    }
    // A delta that changes nothing makes its expert the base's own; the rest are kept, in position order.
    std::vector<HostDelta> kept;
    const std::size_t first_delta = deltas_.size() - static_cast<std::size_t>(std::count_if(experts.begin(), experts.end(), [](const HostExpert& e) { return e.delta >= 0; }));
    for (HostExpert& e : experts) {
      if (e.delta < 0) continue;
      HostDelta& d = deltas_[static_cast<std::size_t>(e.delta)];
      if (expands_to_zero(d.gate, d.format) && expands_to_zero(d.up, d.format) && expands_to_zero(d.down, d.format)) {
        e.delta = -1;
        continue;
      }
      host_bytes_ += d.bytes();
      max_delta_bytes_ = std::max(max_delta_bytes_, d.bytes());
      e.delta = static_cast<DeltaId>(first_delta + kept.size());
      kept.push_back(std::move(d));
    }
    deltas_.resize(first_delta);
    std::move(kept.begin(), kept.end(), std::back_inserter(deltas_));
    const auto [set, added] = set_index.emplace(non_expert, static_cast<int>(sets_.size()));
    if (added) sets_.push_back(std::move(non_expert));
    t.set = set->second;
    for (std::size_t p = 0; p < positions; ++p) {
      const HostExpert& e = experts[p];
      if (e.gate < 0) continue;  // dense layer
      const auto [it, fresh] = expert_index.emplace(std::make_tuple(e.gate, e.up, e.down, e.delta), static_cast<ExpertId>(experts_.size()));
      if (fresh) experts_.push_back(e);
      t.experts[p] = it->second;
    }
    targets_.push_back(std::move(t));
  }
  tier_ = std::make_unique<HostTier>(host_budget);
  for (const HostTensor& t : tensors_) tier_->add(t.bytes);
  for (HostExpert& e : experts_)
    if (e.delta >= 0)
      if (const auto it = expert_index.find(std::make_tuple(e.gate, e.up, e.down, DeltaId(-1))); it != expert_index.end()) e.dense = it->second;
  // An adapter's or delta folder's base, when the family holds it: the variant opened from its
  // base_model folder.
  for (std::size_t a = 0; a < targets_.size(); ++a) {
    if (!targets_[a].adapter && !targets_[a].delta) continue;
    const auto base = canonical_or_self(family.variants()[a].checkpoint->base_dir());
    for (std::size_t b = 0; b < targets_.size(); ++b)
      if (!targets_[b].adapter && !targets_[b].delta && canonical_or_self(family.variants()[b].checkpoint->dir()) == base)
        targets_[a].base = static_cast<int>(b);
  }
}

int HostStore::index(const std::string& name) const {
  for (std::size_t i = 0; i < targets_.size(); ++i)
    if (targets_[i].name == name) return static_cast<int>(i);
  return -1;
}

std::vector<int> HostStore::indices(const Family& family) const {
  std::vector<int> out;
  for (const Variant& v : family.variants()) out.push_back(index(v.name));
  return out;
}

TensorId HostStore::set_tensor(int set, const std::string& name) const {
  for (std::size_t i = 0; i < non_expert_names_.size(); ++i)
    if (non_expert_names_[i] == name) return sets_[static_cast<std::size_t>(set)][i];
  throw MissingError("host store", "tensor '" + name + "'", "is not a non-expert weight of this model");
}

ExpertId HostStore::expert(int target, std::int64_t layer, std::int64_t expert) const {
  return targets_[static_cast<std::size_t>(target)].experts[static_cast<std::size_t>(layer * spec_.num_experts + expert)];
}

ExpertSource HostStore::source(int target, std::int64_t layer, std::int64_t expert) const {
  const Target& t = targets_[static_cast<std::size_t>(target)];
  if (t.delta) {
    const ExpertId id = t.experts[static_cast<std::size_t>(layer * spec_.num_experts + expert)];
    if (id >= 0 && experts_[static_cast<std::size_t>(id)].delta >= 0) return ExpertSource::delta(target, expert);
    return ExpertSource::full(t.base >= 0 ? t.base : target, expert);
  }
  if (!t.adapter) return ExpertSource::full(target, expert);
  for (const auto& [l, e] : t.tuned)
    if (l == layer && e == expert) return ExpertSource::adapter(target, expert);
  return ExpertSource::full(t.base >= 0 ? t.base : target, expert);
}

}  // namespace mosaic
