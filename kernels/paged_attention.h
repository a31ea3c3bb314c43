#pragma once
// Attention over paged keys and values. The cache of one layer is a pool of rows [rows, kv_heads,
// head_dim] in bf16 (the planner's 2 bytes per element); a sequence's position p lives in row blocks[p / block_tokens] · block_tokens +
// p % block_tokens of its block list. Prefill and decode are one kernel: each query token carries its
// position p and sees its sequence's positions 0 … p (causal), so a prompt chunk attends to the
// cache and to itself once its keys are written.
#include <cstdint>

#include "kernels/bf16.h"

namespace mosaic::kernels {

struct PagedQueries {
  const std::int32_t* position = nullptr;     // [tokens]
  const std::int32_t* block_offset = nullptr;  // [tokens]: where the token's sequence's blocks start in `blocks`
  const std::int32_t* blocks = nullptr;        // the sequences' block lists, concatenated
  int block_tokens = 16;
};

// The most positions one query may see: the kernel keeps a query's scores in shared memory.
constexpr int kMaxAttentionPositions = 12288;

// k, v [tokens, kv_heads, head_dim] → the cache rows of their positions.
int kv_write_cuda(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim, bf16_t* k_cache,
                  bf16_t* v_cache, void* stream);
// q [tokens, heads, head_dim] → out [tokens, heads · head_dim]; head h reads kv head h / (heads / kv_heads).
// max_positions: at least every token's position + 1, at most kMaxAttentionPositions.
int paged_attention_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                         int max_positions, const bf16_t* k_cache, const bf16_t* v_cache, float* out, void* stream);

// CPU references over host copies of the same arrays.
void kv_write_reference(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim,
                        bf16_t* k_cache, bf16_t* v_cache);
void paged_attention_reference(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                               const bf16_t* k_cache, const bf16_t* v_cache, float* out);

}  // namespace mosaic::kernels
