// The CUDA backend's batched step: every chunk's tokens through the model on one stream. Dense work
// runs per resident-set group (each group's rows through its buffer's weights); rotary, the KV writes
// and attention run over all tokens at once (a decode step's rotary and KV writes inside each group's
// q/k/v launch); MoE layers over all tokens (cuda_moe.cpp). The host
// waits once per step, for the logits — and once per MoE layer whose pairs may miss.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"
#include "kernels/token_candidates.h"
#include "kernels/transformer_ops.h"
#include "runtime/cuda/cuda_backend.h"

namespace mosaic::cuda {

StepResult CudaBackend::run(const StepBatch& batch, MoeState& state) {
  const ModelSpec& s = spec_;
  StepResult result;
  result.counts.assign(static_cast<std::size_t>(batch.sequences), std::vector<LayerCounts>(static_cast<std::size_t>(s.num_layers)));
  result.routes.resize(static_cast<std::size_t>(batch.sequences));  // traced by plan_on_host (cuda_moe.cpp)
  result.logits.resize(batch.chunks.size());
  ++steps_;
  StepInputs in = step_inputs(batch, s, inv_freq_, shape_.kv_block_tokens);
  if (in.tokens == 0) return result;
  if (!prepared_draws_) std::fill(in.temperature.begin(), in.temperature.end(), -1.0);
  if (in.max_positions > kernels::kMaxAttentionPositions)
    throw InvalidArgument("step", "context of " + std::to_string(in.max_positions) + " tokens",
                          "is longer than the CUDA attention kernel holds (" + std::to_string(kernels::kMaxAttentionPositions) + ")",
                          "shorten the prompt or the maximum new tokens");
  reserve_kv(in.highest_block + 1);
  const auto wanted = static_cast<std::int64_t>(in.wanted.size());
  upload_tables(state);
  routed_on_device_.assign(static_cast<std::size_t>(s.num_layers), false);
  if (prefetch_layer_ >= 0) {  // a step that threw left copies unawaited: none may land under this one
    MOSAIC_CUDA_CHECK(cudaStreamSynchronize(copy_));
    prefetch_layer_ = -1;
  }
  measures_importance_ = state.importance != nullptr;
  if (measures_importance_) MOSAIC_CUDA_CHECK(cudaMemsetAsync(importance_.get(), 0, importance_.bytes(), stream_));
  if (graphable(in, state)) {
    run_graph(in, state, result);
  } else {
    reserve_workspace(in.tokens, wanted);
    // The step's inputs in one copy.
    const PackedInputs packed = pack(in);
    inputs_host_.reserve(packed.bytes.size());
    inputs_.reserve(packed.bytes.size());
    std::memcpy(inputs_host_.get(), packed.bytes.data(), packed.bytes.size());
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(inputs_.get(), inputs_host_.get(), packed.bytes.size(), cudaMemcpyHostToDevice, stream_));
    in.device = device_inputs(inputs_.get<std::byte>(), packed);
    forward(in, state, result, in.max_positions);
  }
  if (measures_importance_)
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(importance_host_.get(), importance_.get(), importance_.bytes(), cudaMemcpyDeviceToHost, stream_));
  MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (measures_importance_) read_importance(state);

  // The wanted rows in the order step_inputs listed them: whole, or drawn from what the step prepared.
  const float* data = logits_host_.get<float>();
  const DrawLayout drawn = draw_layout(wanted);
  std::int64_t row = 0;
  for (const TokenGroup& g : in.groups)
    for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
      if (in.offset[ci] < g.begin || in.offset[ci] >= g.end) continue;
      const StepChunk& c = batch.chunks[ci];
      if (c.emit == Emit::Nothing || c.tokens.empty()) continue;
      const std::int64_t rows = c.emit == Emit::Last ? 1 : static_cast<std::int64_t>(c.tokens.size());
      if (in.temperature[static_cast<std::size_t>(row)] >= 0) {
        result.candidates.resize(batch.chunks.size());
        result.candidates[ci] = prepared_draw(drawn, row, in.temperature[static_cast<std::size_t>(row)]);
      } else {
        Logits& out = result.logits[ci];
        out.vocab = s.vocab_size;
        out.rows = rows;
        out.values.assign(data + row * s.vocab_size, data + (row + rows) * s.vocab_size);
      }
      row += rows;
    }

  // The bookkeeping of layers routed on the device — slot use times, hits, dropped pairs — replayed
  // from their top-k, exactly as a host plan would have kept it (no loads: every pair hit).
  const std::int64_t P = in.tokens * s.top_k;
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (routed_on_device_[static_cast<std::size_t>(l)]) plan_on_host(l, ids_host_.get<std::int32_t>() + l * P, in, state, result);
  // Layers routed on the host were traced as they ran, those on the device just now: layer by layer again.
  if (in.any_traced)
    for (std::vector<RoutedExpert>& routes : result.routes)
      std::stable_sort(routes.begin(), routes.end(), [](const RoutedExpert& a, const RoutedExpert& b) { return a.layer < b.layer; });
  if (in.tokens == 1 && layer_times_) time_layers_alone(in, result);  // after the replay: a layer's hits are counted
  return result;
}

void CudaBackend::mark(std::int64_t layer, int point) {
  // Inside a graph's capture the record must be a node of its own (External), else it only orders
  // the capture; outside one that flag is invalid.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  MOSAIC_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  const unsigned flags = capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault;
  MOSAIC_CUDA_CHECK(cudaEventRecordWithFlags(layer_marks_[static_cast<std::size_t>(3 * layer + point)], stream_, flags));
}

void CudaBackend::time_layers_alone(const StepInputs& in, StepResult& result) const {
  const auto sequence = static_cast<std::size_t>(in.sequence.front());
  auto seconds = [&](std::int64_t l, int from) {
    float ms = 0;
    MOSAIC_CUDA_CHECK(cudaEventElapsedTime(&ms, layer_marks_[static_cast<std::size_t>(3 * l + from)],
                                           layer_marks_[static_cast<std::size_t>(3 * l + from + 1)]));
    return ms / 1e3;
  };
  for (std::int64_t l = 0; l < spec_.num_layers; ++l)
    if (spec_.is_sparse(l)) {
      LayerCounts& c = result.counts[sequence][static_cast<std::size_t>(l)];
      c.add_alone(c.hits, seconds(l, 0), seconds(l, 1));
    }
}

bool CudaBackend::head_in_place(const StepInputs& in, const TokenGroup& g) const {
  const std::int64_t n = g.wanted_end - g.wanted_begin;
  if (!fused_ || n == 0 || n > kGemvRows || n != g.end - g.begin) return false;
  for (std::int64_t i = 0; i < n; ++i)
    if (in.wanted[static_cast<std::size_t>(g.wanted_begin + i)] != g.begin + i) return false;
  return true;
}

kernels::L2Prefetch CudaBackend::ahead_of_output(std::int64_t layer, const StepInputs& in) const {
  kernels::L2Prefetch f;
  if (!l2_prefetch_ || !fused_) return f;
  const LayerOffsets& L = layout_.layers[static_cast<std::size_t>(layer)];
  const std::size_t bytes = static_cast<std::size_t>(spec_.hidden_size * spec_.o_width()) * sizeof(bf16_t);
  for (const TokenGroup& g : in.groups) f.add(weight(g.buffer, L.wo), bytes);  // the first kRanges groups'
  return f.limit(l2_bytes_ / 2);
}

kernels::L2Prefetch CudaBackend::ahead_of_qkv(std::int64_t layer, int buffer) const {
  kernels::L2Prefetch f;
  if (!l2_prefetch_ || !fused_ || layer >= spec_.num_layers || spec_.mla) return f;  // MLA's projections are not these
  const LayerOffsets& L = layout_.layers[static_cast<std::size_t>(layer)];
  const auto H = static_cast<std::size_t>(spec_.hidden_size);
  f.add(weight(buffer, L.wq), H * static_cast<std::size_t>(spec_.q_width()) * sizeof(bf16_t));
  f.add(weight(buffer, L.wk), H * static_cast<std::size_t>(spec_.kv_width()) * sizeof(bf16_t));
  f.add(weight(buffer, L.wv), H * static_cast<std::size_t>(spec_.kv_width()) * sizeof(bf16_t));
  return f.limit(l2_bytes_ / 2);
}

void CudaBackend::forward(const StepInputs& in, MoeState& state, StepResult& result, int attention_positions) {
  const ModelSpec& s = spec_;
  const int T = static_cast<int>(in.tokens), H = static_cast<int>(s.hidden_size);
  const int nh = static_cast<int>(s.num_heads), kvh = static_cast<int>(s.num_kv_heads), hd = static_cast<int>(s.head_dim);
  const kernels::PagedQueries pq{in.device.positions, in.device.block_offset, in.device.blocks, static_cast<int>(shape_.kv_block_tokens)};
  const float eps = static_cast<float>(s.rms_norm_eps);
  Workspace& w = work_;
  // The tiled attention only for a step that has a prompt tile: a decode step would launch it idle.
  bool tiles = false;
  for (int t = 0; tiled_attention_ && !tiles && t * kernels::kTileQueries < T; ++t)
    tiles = kernels::is_query_tile(in.positions.data(), in.block_offset.data(), T, t);

  for (const TokenGroup& g : in.groups)
    MOSAIC_CUDA_CHECK(kernels::embed_rows_cuda(weight(g.buffer, layout_.embed), in.device.ids + g.begin, static_cast<int>(g.end - g.begin),
                                               H, w.x + g.begin * H, stream_));
  const bool alone = T == 1 && layer_times_;  // its MoE layers are timed (time_layers_alone)
  // A decode step's q/k norms, clamp, rotary embedding and cache write are made by its q, k and v
  // launches' last blocks.
  // (A clip of 0 or less, which the separate clamp applies, is left to it: the tail clamps above 0.)
  const bool clip_in_tail = !s.clip_qkv || static_cast<float>(*s.clip_qkv) > 0.0f;
  const bool rotary_in_projection = fused_ && clip_in_tail && std::all_of(in.groups.begin(), in.groups.end(), [](const TokenGroup& g) {
    return g.end - g.begin <= kGemvRows;
  });
  kernels::QkPrepare prepare{nullptr, nullptr, s.qk_norm == QkNorm::PerHead, eps, s.clip_qkv ? static_cast<float>(*s.clip_qkv) : 0.0f};
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const LayerOffsets& L = layout_.layers[static_cast<std::size_t>(l)];
    bf16_t* kc = k_[static_cast<std::size_t>(l)].get<bf16_t>();
    bf16_t* vc = v_[static_cast<std::size_t>(l)].get<bf16_t>();
    if (alone && s.is_sparse(l)) mark(l, 0);
    if (s.mla) {
      latent_attention(l, in);
    } else {
      for (const TokenGroup& g : in.groups) {
        const std::int64_t n = g.end - g.begin;
        const int b = g.buffer;
        float *x = w.x + g.begin * H, *h = w.h + g.begin * H;
        float *q = w.q + g.begin * s.q_width(), *k = w.k + g.begin * s.kv_width(), *v = w.v + g.begin * s.kv_width();
        if (fused_ && n <= kGemvRows) {  // the input norm folded into the projections: h is not written
          const kernels::LinearPart parts[] = {{weight(b, L.wq), static_cast<int>(s.q_width()), weight(b, L.bq), q},
                                               {weight(b, L.wk), static_cast<int>(s.kv_width()), weight(b, L.bk), k},
                                               {weight(b, L.wv), static_cast<int>(s.kv_width()), weight(b, L.bv), v}};
          kernels::RotaryWrite rotary{};
          if (rotary_in_projection) {
            const kernels::PagedQueries group_pq{pq.position + g.begin, pq.block_offset + g.begin, pq.blocks, pq.block_tokens};
            rotary = {in.device.cos + g.begin * hd, in.device.sin + g.begin * hd, group_pq, nh, kvh, hd, kc, vc, tail_counter(0), prepare};
            if (s.qk_norm != QkNorm::None) {
              rotary.prepare.q_norm = weight(b, L.q_norm);
              rotary.prepare.k_norm = weight(b, L.k_norm);
            }
          }
          MOSAIC_CUDA_CHECK(kernels::linear_parts_cuda(x, static_cast<int>(n), H, parts, 3, stream_, {weight(b, L.input_norm), eps}, rotary));
        } else {
          MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(x, weight(b, L.input_norm), static_cast<int>(n), H, eps, h, stream_));
          linear(h, n, H, weight(b, L.wq), s.q_width(), weight(b, L.bq), false, q);
          linear(h, n, H, weight(b, L.wk), s.kv_width(), weight(b, L.bk), false, k);
          linear(h, n, H, weight(b, L.wv), s.kv_width(), weight(b, L.bv), false, v);
        }
        if (rotary_in_projection) continue;  // the norms and the clamp too
        if (s.qk_norm == QkNorm::Whole) {  // OLMoE: over the whole projection
          MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(q, weight(b, L.q_norm), static_cast<int>(n), static_cast<int>(s.q_width()), eps, q, stream_));
          MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(k, weight(b, L.k_norm), static_cast<int>(n), static_cast<int>(s.kv_width()), eps, k, stream_));
        }
        if (s.clip_qkv) {
          const auto c = static_cast<float>(*s.clip_qkv);
          MOSAIC_CUDA_CHECK(kernels::clamp_cuda(q, n * s.q_width(), c, stream_));
          MOSAIC_CUDA_CHECK(kernels::clamp_cuda(k, n * s.kv_width(), c, stream_));
          MOSAIC_CUDA_CHECK(kernels::clamp_cuda(v, n * s.kv_width(), c, stream_));
        }
        if (s.qk_norm == QkNorm::PerHead) {  // Qwen3: per head
          MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(q, weight(b, L.q_norm), static_cast<int>(n) * nh, hd, eps, q, stream_));
          MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(k, weight(b, L.k_norm), static_cast<int>(n) * kvh, hd, eps, k, stream_));
        }
      }
      if (fused_ && !rotary_in_projection) {
        MOSAIC_CUDA_CHECK(kernels::rotary_kv_write_cuda(w.q, w.k, w.v, in.device.cos, in.device.sin, pq, T, nh, kvh, hd, kc, vc, stream_));
      } else if (!fused_) {
        MOSAIC_CUDA_CHECK(kernels::rope_cuda(w.q, in.device.cos, in.device.sin, T, nh, hd, stream_));
        MOSAIC_CUDA_CHECK(kernels::rope_cuda(w.k, in.device.cos, in.device.sin, T, kvh, hd, stream_));
        MOSAIC_CUDA_CHECK(kernels::kv_write_cuda(w.k, w.v, pq, T, kvh, hd, kc, vc, stream_));
      }
      MOSAIC_CUDA_CHECK(kernels::paged_attention_cuda(w.q, pq, T, nh, kvh, hd, attention_positions, kc, vc, w.attn, tiles, stream_,
                                                      {attention_split_.get(), attention_split_.bytes()}, ahead_of_output(l, in),
                                                      tensor_core_attention_));
    }
    const bool on_device = s.is_sparse(l) && routable_on_device(l, in, state);
    // A one-set decode step's output projection is made by its routing launch (moe(), norm_route_cuda
    // with a Projection). A lone token's MoE layer is timed from its post-attention norm on, or from
    // that launch: the expert block counts the norm, and then the projection too.
    const bool projects = on_device && norm_routes(in) && T <= kernels::kProjectMaxTokens;
    if (alone && s.is_sparse(l) && projects) mark(l, 1);
    if (!projects)
      for (const TokenGroup& g : in.groups)
        linear(w.attn + g.begin * s.o_width(), g.end - g.begin, s.o_width(), weight(g.buffer, L.wo), H, weight(g.buffer, L.bo), true,
               w.x + g.begin * H);
    if (alone && s.is_sparse(l) && !projects) mark(l, 1);
    if (!(on_device && norm_routes(in)))  // else moe() normalizes
      for (const TokenGroup& g : in.groups)
        MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(w.x + g.begin * H, weight(g.buffer, L.post_norm), static_cast<int>(g.end - g.begin), H,
                                                 eps, w.h + g.begin * H, stream_));
    if (s.is_sparse(l)) {
      moe(l, in, state, result, on_device, projects);
      if (alone) mark(l, 2);
    } else {
      for (const TokenGroup& g : in.groups)
        swiglu(g.buffer, L, s.dense_intermediate, w.h + g.begin * H, g.end - g.begin, true, w.x + g.begin * H);
    }
  }

  // Logits of the rows the chunks ask for, one projection per group: the final norm folded into it
  // where the rows are the group's tokens in order (head_in_place), else gathered and normalized first.
  for (const TokenGroup& g : in.groups) {
    const std::int64_t n = g.wanted_end - g.wanted_begin;
    if (n == 0) continue;
    if (head_in_place(in, g)) {
      const kernels::LinearPart head[] = {{weight(g.buffer, layout_.lm_head), static_cast<int>(s.vocab_size), nullptr,
                                           w.logits + g.wanted_begin * s.vocab_size}};
      MOSAIC_CUDA_CHECK(kernels::linear_parts_cuda(w.x + g.begin * H, static_cast<int>(n), H, head, 1, stream_,
                                                   {weight(g.buffer, layout_.final_norm), eps}));
      continue;
    }
    MOSAIC_CUDA_CHECK(kernels::gather_rows_cuda(w.x, H, in.device.wanted + g.wanted_begin, static_cast<int>(n), 1, w.h, stream_));
    MOSAIC_CUDA_CHECK(kernels::rms_norm_cuda(w.h, weight(g.buffer, layout_.final_norm), static_cast<int>(n), H, eps, w.h, stream_));
    linear(w.h, n, H, weight(g.buffer, layout_.lm_head), s.vocab_size, nullptr, false, w.logits + g.wanted_begin * s.vocab_size);
  }
  // Rows to be drawn from come back as their draws' candidates (4 KB a row, not the vocabulary); the
  // logits come back only when some row is wanted whole.
  const auto wanted = static_cast<std::int64_t>(in.wanted.size());
  if (in.draws()) {
    const DrawLayout d = draw_layout(wanted);
    std::byte* at = w.draws;
    MOSAIC_CUDA_CHECK(kernels::token_candidates_cuda(w.logits, static_cast<int>(wanted), static_cast<int>(s.vocab_size), in.device.temperature,
                                                     kDrawCandidates, reinterpret_cast<std::int32_t*>(at + d.first_max),
                                                     reinterpret_cast<float*>(at + d.max_logit), reinterpret_cast<double*>(at + d.normaliser),
                                                     reinterpret_cast<std::uint64_t*>(at + d.keys), stream_));
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(draws_host_.get(), at, d.bytes_through(in.sampled_rows()), cudaMemcpyDeviceToHost, stream_));
  }
  const std::size_t logit_bytes = static_cast<std::size_t>(wanted * s.vocab_size) * sizeof(float);
  if (logit_bytes && in.whole_rows())
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(logits_host_.get(), w.logits, logit_bytes, cudaMemcpyDeviceToHost, stream_));
  const std::int64_t P = in.tokens * s.top_k;
  MOSAIC_CUDA_CHECK(cudaMemcpyAsync(ids_host_.get(), w.topk_ids, static_cast<std::size_t>(s.num_layers * P) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
}

TokenCandidates CudaBackend::prepared_draw(const DrawLayout& d, std::int64_t row, double temperature) const {
  const std::int64_t V = spec_.vocab_size;
  const std::byte* h = draws_host_.get<std::byte>();
  TokenCandidates c;
  c.vocab = V;
  c.temperature = temperature;
  c.first_max = reinterpret_cast<const std::int32_t*>(h + d.first_max)[row];
  c.max_logit = reinterpret_cast<const float*>(h + d.max_logit)[row];
  if (temperature > 0) {
    c.normaliser = reinterpret_cast<const double*>(h + d.normaliser)[row];
    const std::uint64_t* keys = reinterpret_cast<const std::uint64_t*>(h + d.keys) + row * kDrawCandidates;
    c.keys.assign(keys, keys + std::min<std::int64_t>(kDrawCandidates, V));
  }
  // Valid until the next step rewrites the workspace (the engine draws before it runs another), from
  // any thread: the draws may run on several.
  c.row = [this, from = work_.logits + row * V, V, step = steps_] {
    if (step != steps_) throw InvalidArgument("sampling", "a prepared draw's row", "was asked for after the backend's next step");
    MOSAIC_CUDA_CHECK(cudaSetDevice(device_));
    std::vector<float> out(static_cast<std::size_t>(V));
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(out.data(), from, out.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  };
  return c;
}

void CudaBackend::swiglu(int buffer, const LayerOffsets& L, std::int64_t width, const float* h, std::int64_t n, bool accumulate,
                         float* out) {
  const std::int64_t H = spec_.hidden_size;
  Workspace& w = work_;
  linear(h, n, H, weight(buffer, L.mlp_gate), width, nullptr, false, w.mlp);
  linear(h, n, H, weight(buffer, L.mlp_up), width, nullptr, false, w.mlp + n * width);
  MOSAIC_CUDA_CHECK(kernels::silu_mul_cuda(w.mlp, w.mlp + n * width, static_cast<int>(n), static_cast<int>(width), w.mlp2, stream_));
  linear(w.mlp2, n, width, weight(buffer, L.mlp_down), H, nullptr, accumulate, out);
}

}  // namespace mosaic::cuda
