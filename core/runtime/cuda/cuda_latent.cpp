// DeepSeek's latent attention on the CUDA backend, in the absorbed form for every step (decode and
// prefill alike): the cache holds each token's normalized latent and rotary key (kv_cache_width()
// values, 1/8.9 of full keys and values for V2-Lite: bench-esft), and no per-head key or value is ever made.
// A prefill could expand keys and values instead (fewer flops for long prompts); this path does not.
// The projections run per resident-set group (each variant's weights), the attention over all
// tokens at once. q_a_layernorm and kv_a_layernorm keep eps 1e-6, as transformers builds them.
#include "kernels/latent_attention.h"
#include "kernels/transformer_ops.h"
#include "runtime/cuda/cuda_backend.h"

namespace mosaic::cuda {

void CudaBackend::latent_attention(std::int64_t layer, const StepInputs& in) {
  const ModelSpec& s = spec_;
  const LatentAttention& a = *s.mla;
  const LayerOffsets& L = layout_.layers[static_cast<std::size_t>(layer)];
  const kernels::LatentShape shape = latent_shape(s);
  const std::int64_t H = s.hidden_size, rope = a.rope_dim, row = shape.row();
  constexpr float kLatentEps = 1e-6f;
  const float eps = static_cast<float>(s.rms_norm_eps);
  const kernels::PagedQueries pq{in.device.positions, in.device.block_offset, in.device.blocks, static_cast<int>(shape_.kv_block_tokens)};
  bf16_t* cache = k_[static_cast<std::size_t>(layer)].get<bf16_t>();
  Workspace& w = work_;
  for (const TokenGroup& g : in.groups) {
    const std::int64_t n = g.end - g.begin;
    const int b = g.buffer;
    float *x = w.x + g.begin * H, *h = w.h + g.begin * H;
    float *q = w.q + g.begin * s.q_width(), *kv = w.k + g.begin * row;
    MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(x, weight(b, L.input_norm), static_cast<int>(n), static_cast<int>(H), eps, h, stream_));
    if (a.q_lora_rank > 0) {
      float* low = w.q_low + g.begin * a.q_lora_rank;
      linear(h, n, H, weight(b, L.wq_a), a.q_lora_rank, weight(b, L.bq_a), false, low);
      MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(low, weight(b, L.q_a_norm), static_cast<int>(n), static_cast<int>(a.q_lora_rank), kLatentEps, low, stream_));
      linear(low, n, a.q_lora_rank, weight(b, L.wq_b), s.q_width(), nullptr, false, q);
    } else {
      linear(h, n, H, weight(b, L.wq), s.q_width(), nullptr, false, q);
    }
    linear(h, n, H, weight(b, L.wkv_a), row, weight(b, L.bkv_a), false, kv);
    const float *cos = in.device.cos + g.begin * rope, *sin = in.device.sin + g.begin * rope;
    const kernels::PagedQueries group_pq{pq.position + g.begin, pq.block_offset + g.begin, pq.blocks, pq.block_tokens};
    MOSAIC_CUDA_CHECK(kernels::latent_kv_write_cuda(kv, weight(b, L.kv_a_norm), kLatentEps, cos, sin, group_pq, static_cast<int>(n), shape,
                                                    cache, stream_));
    MOSAIC_CUDA_CHECK(kernels::latent_queries_cuda(q, weight(b, L.wkv_b), cos, sin, static_cast<int>(n), shape,
                                                   w.latent_q + g.begin * shape.heads * row, stream_));
  }
  // Every group's latents are in the cache before any token attends: a chunk sees its own positions.
  MOSAIC_CUDA_CHECK(kernels::latent_attention_cuda(w.latent_q, pq, static_cast<int>(in.tokens), shape, static_cast<float>(s.softmax_scale()),
                                                   cache, w.latent_out, stream_));
  for (const TokenGroup& g : in.groups)
    MOSAIC_CUDA_CHECK(kernels::latent_values_cuda(w.latent_out + g.begin * shape.heads * shape.rank, weight(g.buffer, L.wkv_b),
                                                  static_cast<int>(g.end - g.begin), shape, w.attn + g.begin * s.o_width(), stream_));
}

}  // namespace mosaic::cuda
