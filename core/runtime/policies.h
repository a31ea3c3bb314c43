#pragma once
// Which rows a pinned expert slot serves (Multi-MoE §3.2), and how the scheduler counts KV blocks, by
// name: the sweep parser reads them without the scheduler. Miss policies are types: miss_policy.h.
#include <optional>
#include <string_view>

namespace mosaic {

enum class HitPolicy {
  Consolidated,  // the layout's resident copy serves every target at its position (the paper)
  Strict,        // a slot serves only the targets whose own expert it holds, byte for byte
};

std::string_view hit_policy_name(HitPolicy p);  // "consolidated", "strict"
std::optional<HitPolicy> parse_hit_policy(std::string_view name);

// How the scheduler's admission counts a request's KV blocks (where the pool is bounded).
enum class KvAdmission {
  Greedy,   // the blocks its tokens so far need (vLLM's): more run at once, and when the running
            // sequences' growth exhausts the pool the newest is preempted and later recomputed
  Reserve,  // the blocks it needs at its longest (prompt + max new tokens, as TGI admits): it joins
            // only while the pool holds every running and parked sequence at its longest too, so no
            // running sequence is ever preempted (a parked one's blocks are taken, as under greedy,
            // only where nothing else could run); a request too long for the free blocks waits, and
            // those after it
};
std::optional<KvAdmission> parse_kv_admission(std::string_view name);  // "greedy" or "reserve"

}  // namespace mosaic
