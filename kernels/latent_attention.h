#pragma once
// DeepSeek's multi-head latent attention (MLA) over a paged cache of latents, in the absorbed form
// FlashMLA and vLLM decode with: the cache holds, per token, the RMS-normalized latent [rank] and the
// rotated key part all heads share [rope], in bf16; each head's query is taken into the latent's
// space through its slice of kv_b_proj (W_UK), attends over the cache rows as keys and over their
// latent part as values, and is taken out through its other slice (W_UV). No key or value is ever
// expanded per head. The same pages and block lists as paged_attention.h. Activations fp32, weights
// bf16; each CUDA entry point launches on `stream` and returns the launch's cudaError_t as an int,
// each has a CPU reference of the same signature on host pointers.
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/paged_attention.h"

namespace mosaic::kernels {

struct LatentShape {
  int heads = 0;
  int nope = 0, rope = 0, v = 0;  // per head: the query's no-rope and rotary parts, the value
  int rank = 0;                   // kv_lora_rank: the latent's width
  // Rotary pairs (2i, 2i + 1), as DeepSeek's weights are laid out (V2's complex pairs, V3's
  // rope_interleave), else transformers' halves (i, i + rope/2). cos and sin rows [tokens, rope],
  // their two halves equal (step_inputs' cat(θ, θ)).
  bool interleaved = false;
  MOSAIC_HOST_DEVICE int row() const { return rank + rope; }  // a cache row, and an absorbed query per head
};

// The widest cache row the attention kernel takes (DeepSeek-V2, V3, Kimi-K2: 512 + 64); rank and
// rope must be even.
constexpr int kMaxLatentRow = 576;
bool latent_shape_valid(const LatentShape& s);

// kv [tokens, rank + rope] (kv_a_proj_with_mqa's output) → each token's cache row: the latent part
// normalized (RMSNorm with `norm`, eps), the rotary part turned by the token's cos and sin.
int latent_kv_write_cuda(const float* kv, const bf16_t* norm, float eps, const float* cos, const float* sin, PagedQueries pq, int tokens,
                         LatentShape s, bf16_t* cache, void* stream);
void latent_kv_write_reference(const float* kv, const bf16_t* norm, float eps, const float* cos, const float* sin, PagedQueries pq,
                               int tokens, LatentShape s, bf16_t* cache);

// q [tokens, heads, nope + rope] → out [tokens, heads, rank + rope]: each head's no-rope part times
// its W_UK (rows h·(nope + v) … + nope of kv_b [heads · (nope + v), rank]), its rotary part turned.
int latent_queries_cuda(const float* q, const bf16_t* kv_b, const float* cos, const float* sin, int tokens, LatentShape s, float* out,
                        void* stream);
void latent_queries_reference(const float* q, const bf16_t* kv_b, const float* cos, const float* sin, int tokens, LatentShape s,
                              float* out);

// Absorbed queries [tokens, heads, rank + rope] over their sequences' cache rows 0 … position
// (causal): out [tokens, heads, rank], the softmax (times `scale`) of q · row over the rows' latents.
int latent_attention_cuda(const float* q, PagedQueries pq, int tokens, LatentShape s, float scale, const bf16_t* cache, float* out,
                          void* stream);
void latent_attention_reference(const float* q, PagedQueries pq, int tokens, LatentShape s, float scale, const bf16_t* cache,
                                float* out);

// o [tokens, heads, rank] → out [tokens, heads · v]: each head's latent output times its W_UV (rows
// h·(nope + v) + nope … + v of kv_b), ready for o_proj.
int latent_values_cuda(const float* o, const bf16_t* kv_b, int tokens, LatentShape s, float* out, void* stream);
void latent_values_reference(const float* o, const bf16_t* kv_b, int tokens, LatentShape s, float* out);

}  // namespace mosaic::kernels
