#pragma once
// Attention over paged keys and values. The cache of one layer is a pool of rows [rows, kv_heads,
// head_dim] in bf16 (the planner's 2 bytes per element); a sequence's position p lives in row
// blocks[block_offset + p / block_tokens] · block_tokens + p % block_tokens, its block list starting
// at block_offset. Prefill and decode are one kernel: each query token carries its
// position p and sees its sequence's positions 0 … p (causal), so a prompt chunk attends to the
// cache and to itself once its keys are written.
#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/l2_prefetch.h"

namespace mosaic::kernels {

struct PagedQueries {
  const std::int32_t* position = nullptr;     // [tokens]
  const std::int32_t* block_offset = nullptr;  // [tokens]: where the token's sequence's blocks start in `blocks`
  const std::int32_t* blocks = nullptr;        // the sequences' block lists, concatenated
  int block_tokens = 16;
};

// The most positions one query may see: the kernel keeps a query's scores in shared memory.
constexpr int kMaxAttentionPositions = 12288;

// Prefill tiles. Tile i is query tokens [i · kTileQueries, (i + 1) · kTileQueries). A tile whose
// tokens are one run of one sequence (one block list, consecutive positions), at least
// kMinTileQueries of them, can go to a tiled kernel instead: it stages each block of keys and values
// in shared memory once for all of the tile's queries, where the per-token kernel reads every
// visible key and value again for every query (a 4096-token prefill: 75× its floor on the H100).
// Fewer tokens than that (a decode step) would leave the tiled kernel's threads idle.
constexpr int kTileQueries = 32, kMinTileQueries = 8, kMaxTiledHeadDim = 128;

#if defined(__CUDACC__)
#define MOSAIC_HOST_DEVICE __host__ __device__
#else
#define MOSAIC_HOST_DEVICE
#endif

// The cache row that holds position p of query token `token`'s sequence.
MOSAIC_HOST_DEVICE inline std::int64_t cache_row(const PagedQueries& q, int token, int p) {
  const std::int32_t* blocks = q.blocks + q.block_offset[token];
  return static_cast<std::int64_t>(blocks[p / q.block_tokens]) * q.block_tokens + p % q.block_tokens;
}

// Whether tile `tile` of a step's `tokens` query tokens is one the tiled kernel takes.
MOSAIC_HOST_DEVICE inline bool is_query_tile(const std::int32_t* position, const std::int32_t* block_offset, int tokens, int tile) {
  const int first = tile * kTileQueries, n = tokens - first < kTileQueries ? tokens - first : kTileQueries;
  if (n < kMinTileQueries) return false;
  for (int i = 1; i < n; ++i)
    if (block_offset[first + i] != block_offset[first] || position[first + i] != position[first] + i) return false;
  return true;
}

// k, v [tokens, kv_heads, head_dim] → the cache rows of their positions.
int kv_write_cuda(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim, bf16_t* k_cache,
                  bf16_t* v_cache, void* stream);
// kv_write after the rotary embedding of q and k (transformers' non-interleaved halves, cos and sin
// [tokens, head_dim]) in one launch: q and k rotated in place, k and v then written as kv_write does.
// The same as rope on q, rope on k and kv_write, for a decode step's three launches of ~2 µs.
int rotary_kv_write_cuda(float* q, float* k, const float* v, const float* cos, const float* sin, PagedQueries pq, int tokens,
                         int heads, int kv_heads, int head_dim, bf16_t* k_cache, bf16_t* v_cache, void* stream);

// The split over positions (flash-decoding). With one block per (token, head), a decode step of one
// sequence keeps 16 or 32 of the GPU's SMs busy and each of them walks the whole context. Given
// scratch, a step of fewer (token, head) pairs than about two per SM gives each pair several blocks,
// each over a part of its positions; the last block of a pair to finish adds the parts up. How many
// blocks a token uses is decided on the device from its own length (at least kMinSplitPositions
// each), so one captured graph serves every length, and a short context takes one block as before.
// scratch: attention_split_bytes(head_dim) bytes (or more), zeroed once when allocated; the kernel
// leaves its counters zero again. None: no split.
constexpr int kMinSplitPositions = 128, kMaxSplits = 64;
struct AttentionSplit {
  void* scratch = nullptr;
  std::size_t bytes = 0;
};
// The scratch for the current device's SM count (0 where it cannot be read: no split).
std::size_t attention_split_bytes(int head_dim);
// The blocks per (token, head) a launch of these sizes takes: 1 unless it splits.
int attention_splits(int tokens, int heads, int head_dim, int max_positions, AttentionSplit split);

// q [tokens, heads, head_dim] → out [tokens, heads · head_dim]; head h reads kv head h / (heads / kv_heads).
// max_positions: at least every token's position + 1, at most kMaxAttentionPositions. tiled: query
// tiles (is_query_tile) go to the tiled kernel when head_dim ≤ kMaxTiledHeadDim, the rest token by token.
// next: asked of the L2 by the token-by-token kernel's blocks as they start (the output projection's
// weights, for a decode step).
// tensor_cores: the tiles on tensor cores (tiled_attention_tc_cuda) where tensor_core_tiles allows.
int paged_attention_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                         int max_positions, const bf16_t* k_cache, const bf16_t* v_cache, float* out, bool tiled,
                         void* stream, AttentionSplit split = {}, const L2Prefetch& next = {}, bool tensor_cores = false);
// The query tiles alone (is_query_tile), each a block of two warps whose scores and weighted values
// are wmma bf16 products with fp32 accumulation: the queries (scaled) and the softmax's weights
// rounded to bf16, the softmax online in fp32, keys read straight from the cache 16 positions at a
// time. Tokens outside a tile are left as they are. Needs tensor_core_tiles (cudaErrorInvalidValue else).
bool tensor_core_tiles(int head_dim, int block_tokens);  // head_dim a multiple of 16 up to kMaxTiledHeadDim, blocks of 16k
int tiled_attention_tc_cuda(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim, const bf16_t* k_cache,
                            const bf16_t* v_cache, float* out, void* stream);

// CPU references over host copies of the same arrays.
void kv_write_reference(const float* k, const float* v, PagedQueries q, int tokens, int kv_heads, int head_dim,
                        bf16_t* k_cache, bf16_t* v_cache);
void paged_attention_reference(const float* q, PagedQueries pq, int tokens, int heads, int kv_heads, int head_dim,
                               const bf16_t* k_cache, const bf16_t* v_cache, float* out);

}  // namespace mosaic::kernels
