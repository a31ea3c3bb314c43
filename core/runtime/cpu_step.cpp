// The CPU backend's batched step: every chunk's tokens through the model at once. Dense work runs
// per resident-set group (each group's tokens through its buffer's weights), attention per sequence
// over its own KV blocks, and each MoE layer over all tokens of the step together (cpu_moe.cpp).
#include <algorithm>

#include "common/error.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_ops.h"

namespace mosaic::cpu {
namespace {

at::Tensor long_tensor(const std::vector<std::int64_t>& v) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
}

StepLayout layout_of(const StepBatch& batch) {
  StepLayout out;
  for (std::size_t c = 0; c < batch.chunks.size(); ++c) {
    const StepChunk& chunk = batch.chunks[c];
    out.offset.push_back(out.tokens);
    if (out.groups.empty() || out.groups.back().buffer != chunk.buffer)
      out.groups.push_back({chunk.buffer, out.tokens, out.tokens, c, c});
    const auto n = static_cast<std::int64_t>(chunk.tokens.size());
    out.tokens += n;
    out.groups.back().end = out.tokens;
    out.groups.back().last_chunk = c + 1;
    out.row.insert(out.row.end(), static_cast<std::size_t>(n), chunk.target);
    out.sequence.insert(out.sequence.end(), static_cast<std::size_t>(n), chunk.sequence);
  }
  return out;
}

}  // namespace

at::Tensor CpuBackend::attention(std::int64_t layer, const LayerWeights& L, const at::Tensor& h, const StepBatch& batch,
                                 const StepLayout& layout, const StepLayout::Group& g, const at::Tensor& cos,
                                 const at::Tensor& sin, const std::vector<at::Tensor>& new_slots,
                                 const std::vector<at::Tensor>& all_slots) {
  const ModelSpec& s = store_.spec();
  const std::int64_t n = h.size(0), nh = s.num_heads, kvh = s.num_kv_heads, hd = s.head_dim;
  at::Tensor q = affine(h, L.wq, L.bq);  // [n, nh*hd]
  at::Tensor k = affine(h, L.wk, L.bk);  // [n, kvh*hd]
  at::Tensor v = affine(h, L.wv, L.bv);
  if (s.qk_norm == QkNorm::Whole) {
    q = rms_norm(q, L.q_norm, s.rms_norm_eps);
    k = rms_norm(k, L.k_norm, s.rms_norm_eps);
  }
  if (s.clip_qkv) {
    q = q.clamp(-*s.clip_qkv, *s.clip_qkv);
    k = k.clamp(-*s.clip_qkv, *s.clip_qkv);
    v = v.clamp(-*s.clip_qkv, *s.clip_qkv);
  }
  q = q.view({n, nh, hd});
  k = k.view({n, kvh, hd});
  v = v.view({n, kvh, hd});
  if (s.qk_norm == QkNorm::PerHead) {
    q = rms_norm(q, L.q_norm, s.rms_norm_eps);
    k = rms_norm(k, L.k_norm, s.rms_norm_eps);
  }
  const at::Tensor c = cos.narrow(0, g.begin, n).unsqueeze(1), sn = sin.narrow(0, g.begin, n).unsqueeze(1);  // [n, 1, hd]
  q = rope(q, c, sn);
  k = rope(k, c, sn);
  at::Tensor out = at::empty({n, nh * hd}, at::kFloat);
  at::Tensor& K = k_[static_cast<std::size_t>(layer)];
  at::Tensor& V = v_[static_cast<std::size_t>(layer)];
  for (std::size_t ci = g.first_chunk; ci < g.last_chunk; ++ci) {
    const std::int64_t off = layout.offset[ci] - g.begin, T = static_cast<std::int64_t>(batch.chunks[ci].tokens.size());
    K.index_copy_(0, new_slots[ci], k.narrow(0, off, T));
    V.index_copy_(0, new_slots[ci], v.narrow(0, off, T));
    const at::Tensor keys = K.index_select(0, all_slots[ci]).transpose(0, 1);  // [kvh, S, hd]
    const at::Tensor values = V.index_select(0, all_slots[ci]).transpose(0, 1);
    out.narrow(0, off, T).copy_(attend(q.narrow(0, off, T).transpose(0, 1), keys, values));
  }
  return affine(out, L.wo, L.bo);
}

StepResult CpuBackend::run(const StepBatch& batch, MoeState& moe_state) {
  const ModelSpec& s = store_.spec();
  at::NoGradGuard no_grad;
  StepResult result;
  result.counts.assign(static_cast<std::size_t>(batch.sequences), std::vector<LayerCounts>(static_cast<std::size_t>(s.num_layers)));
  result.logits.resize(batch.chunks.size());
  const StepLayout layout = layout_of(batch);
  if (layout.tokens == 0) return result;

  // Token ids, positions and the KV rows each chunk writes and reads (block · block_tokens + offset).
  std::vector<std::int64_t> ids, positions;
  std::vector<at::Tensor> new_slots, all_slots;
  const std::int64_t bt = shape_.kv_block_tokens;
  std::int64_t highest_block = -1;
  for (const StepChunk& c : batch.chunks) {
    const auto T = static_cast<std::int64_t>(c.tokens.size());
    for (std::int64_t id : c.tokens)
      if (id < 0 || id >= s.vocab_size)
        throw InvalidArgument("step", "token id " + std::to_string(id), "is outside the vocabulary [0, " + std::to_string(s.vocab_size) + ")");
    if (static_cast<std::int64_t>(c.blocks.size()) * bt < c.start + T)
      throw InvalidArgument("step", "KV blocks", "hold fewer positions than the chunk reaches");
    ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    std::vector<std::int64_t> all(static_cast<std::size_t>(c.start + T));
    for (std::int64_t p = 0; p < c.start + T; ++p) {
      all[static_cast<std::size_t>(p)] = static_cast<std::int64_t>(c.blocks[static_cast<std::size_t>(p / bt)]) * bt + p % bt;
      if (p >= c.start) positions.push_back(p);
    }
    for (std::int32_t b : c.blocks) highest_block = std::max<std::int64_t>(highest_block, b);
    new_slots.push_back(long_tensor(std::vector<std::int64_t>(all.begin() + c.start, all.end())));
    all_slots.push_back(long_tensor(all));
  }
  reserve_kv(highest_block + 1);
  const at::Tensor id_t = long_tensor(ids);
  const auto [cos, sin] = rotary(long_tensor(positions), inv_freq_);  // [tokens, hd]

  at::Tensor x = at::empty({layout.tokens, s.hidden_size}, at::kFloat);
  for (const auto& g : layout.groups)
    x.narrow(0, g.begin, g.end - g.begin).copy_(weights(g.buffer).embed.index_select(0, id_t.narrow(0, g.begin, g.end - g.begin)));
  at::Tensor h = at::empty_like(x);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    for (const auto& g : layout.groups) {
      const LayerWeights& L = weights(g.buffer).layers[static_cast<std::size_t>(l)];
      at::Tensor xg = x.narrow(0, g.begin, g.end - g.begin);
      xg.add_(attention(l, L, rms_norm(xg, L.input_norm, s.rms_norm_eps), batch, layout, g, cos, sin, new_slots, all_slots));
      h.narrow(0, g.begin, g.end - g.begin).copy_(rms_norm(xg, L.post_norm, s.rms_norm_eps));
    }
    if (s.is_sparse(l)) {
      x.add_(moe(l, h, layout, moe_state, result));
    } else {
      for (const auto& g : layout.groups)
        x.narrow(0, g.begin, g.end - g.begin)
            .add_(swiglu(h.narrow(0, g.begin, g.end - g.begin), weights(g.buffer).layers[static_cast<std::size_t>(l)].shared));
    }
  }

  for (const auto& g : layout.groups) {
    const ModelWeights& W = weights(g.buffer);
    for (std::size_t ci = g.first_chunk; ci < g.last_chunk; ++ci) {
      const StepChunk& c = batch.chunks[ci];
      if (c.emit == Emit::Nothing) continue;
      const auto T = static_cast<std::int64_t>(c.tokens.size());
      const std::int64_t first = c.emit == Emit::Last ? layout.offset[ci] + T - 1 : layout.offset[ci];
      const at::Tensor rows = x.narrow(0, first, c.emit == Emit::Last ? 1 : T);
      const at::Tensor logits = affine(rms_norm(rows, W.final_norm, s.rms_norm_eps), W.lm_head).contiguous();
      Logits& out = result.logits[ci];
      out.vocab = s.vocab_size;
      out.rows = logits.size(0);
      out.values.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
    }
  }
  return result;
}

}  // namespace mosaic::cpu
