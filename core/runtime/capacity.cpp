#include "runtime/capacity.h"

#include <algorithm>

#include "common/byte_size.h"
#include "common/checked_math.h"
#include "common/error.h"

namespace mosaic {

std::uint64_t CapacityPlan::reserve_bytes() const {
  std::uint64_t n = 0;
  for (const ReserveItem& r : reserve) n = checked_add(n, r.bytes, "reserve", r.name);
  return n;
}

std::uint64_t CapacityPlan::minimum_budget() const {
  return checked_add(checked_add(non_expert_bytes, reserve_bytes(), "reserve", "total"), pinned_floor, "reserve", "total");
}

std::vector<ReserveItem> plan_reserve(const ModelSpec& s, std::uint64_t bytes_per_expert, const ReserveSpec& r) {
  auto check = [](std::int64_t v, const char* field) {
    if (v < 0) throw InvalidArgument("reserve", field, "is negative", "give a count of zero or more");
  };
  check(r.context_tokens, "context tokens");
  check(r.requests, "requests");
  check(r.prefill_chunk, "prefill chunk");
  check(r.kv_bytes, "kv bytes");
  if (r.miss_slots < -1) throw InvalidArgument("reserve", "miss slots", "is negative", "give -1 for top_k, or a count");
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  std::vector<ReserveItem> items;
  // No request holds more than the model's context: a reserve of 4096 tokens (the default) for a
  // 512-token model would keep eight times the KV cache and score rows any request can use.
  const std::int64_t context = s.max_position_embeddings > 0 ? std::min(r.context_tokens, s.max_position_embeddings) : r.context_tokens;
  const std::string context_text =
      std::to_string(context) + (context < r.context_tokens ? " tokens (the model's context) × " : " tokens × ");

  // Each item checked as it is multiplied out: 2^62 tokens must not wrap to a 0-byte reserve.
  const std::uint64_t kv = checked_product({u(s.num_layers), u(s.kv_cache_width()), u(context), u(r.requests), u(r.kv_bytes)},
                                           "reserve", "kv cache (context tokens × requests)");
  // Latent attention caches one latent and one rotary key a token (DeepSeek: 512 + 64 values), not
  // every head's keys and values.
  const std::string kv_per_token = s.mla ? std::to_string(s.kv_cache_width()) + " (latent " + std::to_string(s.mla->kv_lora_rank) + " + rotary key " +
                                            std::to_string(s.mla->rope_dim) + ")"
                                      : "2 (K,V) × " + std::to_string(s.kv_width());
  items.push_back({"kv cache", kv,
                   kv_per_token + " × " + std::to_string(s.num_layers) + " layers × " + context_text + std::to_string(r.requests) +
                       " requests × " + std::to_string(r.kv_bytes) + " B"});

  // fp32 working set of one prefill step, per token: residual stream and its normed copy, attention
  // input/output, q/k/v, one row of attention scores over the context, the routed experts' gate/up/
  // down activations, the shared expert's, router logits, and the vocabulary logits.
  const std::uint64_t scores = checked_mul(u(s.num_heads), u(context), "reserve", "activations (context tokens)");
  const std::uint64_t per_token = checked_add(u(4 * s.hidden_size + s.q_width() + s.kv_cache_width() + 3 * s.top_k * s.expert_intermediate +
                                                3 * s.shared_expert_intermediate + 3 * s.dense_intermediate + s.num_experts + s.vocab_size),
                                              scores, "reserve", "activations (context tokens)");
  items.push_back({"activations", checked_product({per_token, u(r.prefill_chunk), 4}, "reserve", "activations (prefill chunk)"),
                   std::to_string(per_token) + " fp32 values per token × " + std::to_string(r.prefill_chunk) +
                       " tokens per step"});

  const std::int64_t slots = r.miss_slots < 0 ? s.top_k : r.miss_slots;
  items.push_back({"miss slots", checked_mul(u(slots), bytes_per_expert, "reserve", "miss slots"),
                   std::to_string(slots) + " experts loaded on demand × " + format_bytes(bytes_per_expert)});
  return items;
}

std::int64_t moe_positions(const ModelSpec& spec) { return spec.num_sparse_layers() * spec.num_experts; }

std::int64_t clamp_capacity(std::int64_t capacity, const ModelSpec& spec) {
  return std::clamp<std::int64_t>(capacity, 0, moe_positions(spec));
}

CapacityPlan plan_capacity(const ModelSpec& spec, std::uint64_t non_expert_bytes, std::uint64_t bytes_per_expert,
                           std::uint64_t budget_bytes, const ReserveSpec& reserve) {
  if (bytes_per_expert == 0)
    throw InvalidArgument("budget", "model", "has no routed experts", "a dense model needs no consolidation");
  CapacityPlan p;
  p.budget_bytes = budget_bytes;
  p.non_expert_bytes = non_expert_bytes;
  p.bytes_per_expert = bytes_per_expert;
  p.reserve = plan_reserve(spec, bytes_per_expert, reserve);
  p.positions = moe_positions(spec);
  if (budget_bytes < p.minimum_budget()) {
    std::string items;
    for (const ReserveItem& r : p.reserve) items += ", " + r.name + " " + format_bytes(r.bytes);
    throw BudgetError("budget", format_bytes(budget_bytes),
                      "is below the minimum of " + format_bytes(p.minimum_budget()) + " (" +
                          std::to_string(p.minimum_budget()) + " bytes): non-expert weights " +
                          format_bytes(non_expert_bytes) + items,
                      "raise the budget, or reserve less: a shorter context, fewer requests, a smaller prefill chunk or fewer miss slots");
  }
  const std::uint64_t experts = (budget_bytes - p.minimum_budget()) / bytes_per_expert;
  p.capacity = static_cast<std::int64_t>(std::min<std::uint64_t>(experts, static_cast<std::uint64_t>(p.positions)));
  return p;
}

DeviceBytes device_bytes(const Family& family) {
  const ModelSpec& s = family.spec();
  DeviceBytes b;
  for (const Variant& v : family.variants()) {
    b.non_expert = std::max(b.non_expert, v.checkpoint->non_expert_bytes());
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      if (s.is_sparse(l))
        for (std::int64_t e = 0; e < s.num_experts; ++e) {
          b.per_expert = std::max(b.per_expert, v.checkpoint->expert_bytes(l, e));
          b.max_packed_delta = std::max(b.max_packed_delta, v.checkpoint->packed_delta_bytes(l, e));
        }
  }
  return b;
}

CapacityPlan plan_capacity(const Family& family, std::uint64_t budget_bytes, const ReserveSpec& reserve) {
  const DeviceBytes b = device_bytes(family);
  // A delta folder's copy of an expert, pinned or loaded on a miss, holds the base's weights and its
  // pack (the runtime's byte model): every position and miss slot is priced at the dearest copy.
  return plan_capacity(family.spec(), b.non_expert, b.per_expert + b.max_packed_delta, budget_bytes, reserve);
}

TierBytes tier_bytes(std::uint64_t distinct_bytes, std::uint64_t device_bytes, std::optional<std::uint64_t> host_budget) {
  const std::uint64_t ram = host_budget ? std::min(*host_budget, distinct_bytes) : distinct_bytes;
  return {.device = device_bytes, .ram = ram, .disk = distinct_bytes - ram, .distinct = distinct_bytes};
}

std::uint64_t planned_device_bytes(const CapacityPlan& plan) {
  const std::uint64_t experts = checked_mul(static_cast<std::uint64_t>(plan.capacity), plan.bytes_per_expert, "capacity", "resident experts");
  return checked_add(checked_add(plan.non_expert_bytes, experts, "capacity", "device bytes"), plan.reserve_bytes(), "capacity", "device bytes");
}

int planned_sets(const CapacityPlan& one_set, int distinct_sets) {
  if (distinct_sets < 2 || one_set.bytes_per_expert == 0) return 1;
  const auto cost = static_cast<std::int64_t>((one_set.non_expert_bytes + one_set.bytes_per_expert - 1) / one_set.bytes_per_expert);
  return cost * kSetShare <= one_set.capacity ? 2 : 1;
}

CapacityPlan with_sets_asked(const CapacityPlan& one_set, int asked, int distinct_sets) {
  return with_sets(one_set, asked == kAutoSets ? planned_sets(one_set, distinct_sets) : std::min(asked, distinct_sets));
}

CapacityPlan with_sets(CapacityPlan one_set, int sets) {
  if (sets <= 1 || one_set.bytes_per_expert == 0) return one_set;
  const std::uint64_t extra = static_cast<std::uint64_t>(sets - 1) * one_set.non_expert_bytes;
  const auto cost = static_cast<std::int64_t>((extra + one_set.bytes_per_expert - 1) / one_set.bytes_per_expert);
  const std::int64_t kept = std::max<std::int64_t>(0, one_set.capacity - cost);
  one_set.positions_for_sets = one_set.capacity - kept;
  one_set.capacity = kept;
  one_set.sets = sets;
  return one_set;
}

std::uint64_t half_resident_budget(const CapacityPlan& unlimited) {
  const std::uint64_t half = checked_mul(unlimited.bytes_per_expert, static_cast<std::uint64_t>(unlimited.positions / 2), "budget", "half the positions");
  return checked_add(unlimited.minimum_budget(), half, "budget", "the default");
}

}  // namespace mosaic
