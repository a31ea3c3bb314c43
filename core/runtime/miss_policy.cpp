#include "runtime/miss_policy.h"

#include <algorithm>

namespace mosaic {
namespace {

// Scratch slots in waves of the pool's size.
void place_in_scratch(std::vector<Placement>& out, std::size_t from, const SlotPool& scratch) {
  const auto n = static_cast<std::size_t>(scratch.size());
  for (std::size_t i = from, k = 0; i < out.size(); ++i, ++k)
    out[i] = {{true, static_cast<std::int32_t>(k % n)}, static_cast<int>(k / n)};
}

class Transient final : public MissPolicy {
 public:
  std::string_view name() const override { return "transient"; }
  std::vector<Placement> place(std::size_t count, const SlotPool&, const SlotPool& scratch, std::uint64_t) const override {
    std::vector<Placement> out(count);
    place_in_scratch(out, 0, scratch);
    return out;
  }
};

class Lru : public MissPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  bool keeps_misses() const override { return true; }
  std::vector<Placement> place(std::size_t count, const SlotPool& layer, const SlotPool& scratch,
                               std::uint64_t since) const override {
    // Spare slots first (empty ones, then the least recently used of those this step has not
    // used); what does not fit this step goes through scratch, as transient misses do.
    std::vector<std::int64_t> free;
    const std::int64_t begin = layer.count(SlotPool::Role::Pinned), end = begin + layer.count(SlotPool::Role::Spare);
    for (std::int64_t s = begin; s < end; ++s)
      if (layer.content(s) < 0 || layer.last_use(s) <= since) free.push_back(s);
    std::stable_sort(free.begin(), free.end(), [&](std::int64_t a, std::int64_t b) {
      const bool fa = layer.content(a) >= 0, fb = layer.content(b) >= 0;
      return fa != fb ? fb : fa && layer.last_use(a) < layer.last_use(b);
    });
    std::vector<Placement> out(count);
    std::size_t i = 0;
    for (; i < count && i < free.size(); ++i) out[i] = {{false, static_cast<std::int32_t>(free[i])}, 0};
    place_in_scratch(out, i, scratch);
    return out;
  }
};

class Prefetch final : public Lru {
 public:
  explicit Prefetch(bool gated) : gated_(gated) {}
  std::string_view name() const override { return gated_ ? "prefetch" : "prefetch-always"; }
  bool prefetches() const override { return true; }
  bool gates_prefetch() const override { return gated_; }

 private:
  bool gated_;
};

class Masked final : public MissPolicy {
 public:
  std::string_view name() const override { return "masked"; }
  bool masks_router() const override { return true; }
  std::vector<Placement> place(std::size_t, const SlotPool&, const SlotPool&, std::uint64_t) const override { return {}; }
};

}  // namespace

std::unique_ptr<MissPolicy> make_miss_policy(std::string_view name) {
  if (name == "transient") return std::make_unique<Transient>();
  if (name == "lru") return std::make_unique<Lru>();
  if (name == "prefetch") return std::make_unique<Prefetch>(true);
  if (name == "prefetch-always") return std::make_unique<Prefetch>(false);
  if (name == "masked") return std::make_unique<Masked>();
  return nullptr;
}

const std::vector<std::string_view>& miss_policy_names() {
  static const std::vector<std::string_view> names{"transient", "lru", "prefetch", "prefetch-always", "masked"};
  return names;
}

std::string miss_policy_choices() {
  const auto& names = miss_policy_names();
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ").append(names[i]);
  return out;
}

}  // namespace mosaic
