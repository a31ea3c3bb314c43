// The CPU backend's batched step: every chunk's tokens through the model at once. Dense work runs
// per resident-set group (each group's tokens through its buffer's weights); attention reads each
// sequence's own KV blocks — a decode token's where they lie (cpu_attention.h), prompt chunks one
// by one; each MoE layer runs over all tokens of the step together (cpu_moe.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include "common/error.h"
#include "runtime/cpu_attention.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_ops.h"
#include "runtime/cpu_rows.h"
#include "runtime/threads.h"

namespace mosaic::cpu {
namespace {

at::Tensor long_tensor(const std::vector<std::int64_t>& v) {
  return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong).clone();
}

// Chunks whose rows of x hold a value that is not finite fail (once, at the first layer that made
// them so), and those rows are zeroed so that nothing after them computes on NaN. Rows of different
// sequences never mix, so the other chunks' values are not touched.
void fail_non_finite(at::Tensor& x, const StepBatch& batch, const StepLayout& layout, StepResult& result, const std::string& where) {
  if (all_finite(x)) return;
  for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    at::Tensor rows = x.narrow(0, layout.offset[ci], static_cast<std::int64_t>(batch.chunks[ci].tokens.size()));
    if (at::isfinite(rows).all().item<bool>()) continue;
    result.fail(batch.chunks.size(), ci,
                where + " computed values that are not finite (its weights' products overflow float32: check the checkpoint's weights)");
    rows.zero_();
  }
}

}  // namespace

// Where a step's keys and values go and come from, in rows of the KV pool (block · block_tokens +
// offset).
struct CpuBackend::KvRows {
  at::Tensor write;                        // [tokens]: the row each new token's key and value go to
  std::vector<std::size_t> decode;         // chunks of one token
  std::vector<std::int64_t> decode_tokens; // [B]: their token index in the step
  std::vector<std::int64_t> decode_rows;   // the rows each reads, one sequence after another
  std::vector<std::int64_t> decode_begin;  // [B + 1]: where each sequence's rows begin in decode_rows
  std::vector<std::size_t> prefill;        // chunks of several tokens
  std::vector<at::Tensor> prefill_rows;    // per prefill chunk: [S]
};

CpuBackend::KvRows CpuBackend::kv_rows(const StepBatch& batch, const StepLayout& layout) {
  const std::int64_t bt = shape_.kv_block_tokens;
  KvRows r;
  std::vector<std::int64_t> write;
  std::int64_t highest_block = -1;
  for (const StepChunk& c : batch.chunks)
    for (std::int32_t b : c.blocks) highest_block = std::max<std::int64_t>(highest_block, b);
  reserve_kv(highest_block + 1);
  auto row = [&](const StepChunk& c, std::int64_t p) {
    return static_cast<std::int64_t>(c.blocks[static_cast<std::size_t>(p / bt)]) * bt + p % bt;
  };
  r.decode_begin.push_back(0);
  for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
    const StepChunk& c = batch.chunks[ci];
    const auto T = static_cast<std::int64_t>(c.tokens.size());
    if (static_cast<std::int64_t>(c.blocks.size()) * bt < c.start + T)
      throw InvalidArgument("step", "KV blocks", "hold fewer positions than the chunk reaches");
    for (std::int64_t p = c.start; p < c.start + T; ++p) write.push_back(row(c, p));
    if (T == 1) {
      r.decode.push_back(ci);
      r.decode_tokens.push_back(layout.offset[ci]);
      for (std::int64_t p = 0; p <= c.start; ++p) r.decode_rows.push_back(row(c, p));
      r.decode_begin.push_back(static_cast<std::int64_t>(r.decode_rows.size()));
    } else {
      r.prefill.push_back(ci);
      std::vector<std::int64_t> all;
      for (std::int64_t p = 0; p < c.start + T; ++p) all.push_back(row(c, p));
      r.prefill_rows.push_back(long_tensor(all));
    }
  }
  r.write = long_tensor(write);
  return r;
}

// q, k, v of a group's tokens, rotary applied; keys and values written to the pool. With latent
// attention the pool row is the normalized latent and the rotated shared key, and the query comes
// back absorbed: each head's no-rope part turned into the latent's space through its slice of
// kv_b_proj (W_UK), so that attention runs over the latent itself, one key "head" shared by all
// (DeepSeek's inference/model.py, attn_impl "absorb"). [n, nh, hd], or [n, nh, rkv + dr].
at::Tensor CpuBackend::project_qkv(std::int64_t layer, const LayerWeights& L, const at::Tensor& h, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& write_rows) {
  const ModelSpec& s = store_->spec();
  if (s.mla) {
    const at::Tensor c = cos.unsqueeze(1), sn = sin.unsqueeze(1);  // [n, 1, d]
    const LatentQkv p = project_latent(s, L, h, /*batched=*/true);  // [n, nh, ·], [n, rkv], [n, dr]
    k_[static_cast<std::size_t>(layer)].index_copy_(0, write_rows, at::cat({p.latent, rotate(s, p.k_pe, cos, sin)}, -1).unsqueeze(1));
    const at::Tensor q_latent = at::bmm(p.q_nope.transpose(0, 1), L.w_uk).transpose(0, 1);  // [n, nh, rkv]
    return at::cat({q_latent, rotate(s, p.q_pe, c, sn)}, -1);
  }
  const auto [q, k, v] = project_heads(s, L, h, /*batched=*/true);  // [n, heads, hd]
  k_[static_cast<std::size_t>(layer)].index_copy_(0, write_rows, rotate_rows(s, k, cos, sin));
  v_[static_cast<std::size_t>(layer)].index_copy_(0, write_rows, v);
  return rotate_rows(s, q, cos, sin);  // [n, nh, hd]
}

// Attention of every chunk over its own cache; q [tokens, nh, dk] → [tokens, nh·dv]. Latent
// attention's values are the latent part of its pool rows.
at::Tensor CpuBackend::attend_all(std::int64_t layer, const at::Tensor& q, const StepBatch& batch, const StepLayout& layout,
                                  const KvRows& rows) {
  const ModelSpec& s = store_->spec();
  const at::Tensor& K = k_[static_cast<std::size_t>(layer)];
  const at::Tensor V = s.mla ? K.narrow(2, 0, s.mla->kv_lora_rank) : v_[static_cast<std::size_t>(layer)];
  const std::int64_t nh = s.num_heads, kvh = K.size(1), hd = K.size(2), dv = V.size(2);
  const double scale = s.softmax_scale();
  at::Tensor out = at::empty({layout.tokens, nh * dv}, at::kFloat);
  if (!rows.decode.empty()) {
    // One query per sequence against its own rows, read where they lie (cpu_attention.h); q and out
    // are the step's, indexed by token.
    const DecodeAttention a{.q = q.data_ptr<float>(),
                            .out = out.data_ptr<float>(),
                            .tokens = rows.decode_tokens.data(),
                            .keys = K.data_ptr<float>(),
                            .values = V.data_ptr<float>(),
                            .key_row = K.stride(0),
                            .value_row = V.stride(0),
                            .rows = rows.decode_rows.data(),
                            .begin = rows.decode_begin.data(),
                            .heads = static_cast<int>(nh),
                            .kv_heads = static_cast<int>(kvh),
                            .key_dim = static_cast<int>(hd),
                            .value_dim = static_cast<int>(dv),
                            .scale = static_cast<float>(scale)};
    decode_attention(a, static_cast<std::int64_t>(rows.decode.size()), at::get_num_threads(), parallel_ranges);
  }
  for (std::size_t i = 0; i < rows.prefill.size(); ++i) {
    const std::size_t ci = rows.prefill[i];
    const std::int64_t off = layout.offset[ci], T = static_cast<std::int64_t>(batch.chunks[ci].tokens.size());
    const at::Tensor keys = K.index_select(0, rows.prefill_rows[i]).transpose(0, 1);  // [kvh, S, hd]
    const at::Tensor values = V.index_select(0, rows.prefill_rows[i]).transpose(0, 1);
    out.narrow(0, off, T).copy_(attend(q.narrow(0, off, T).transpose(0, 1), keys, values, scale));
  }
  return out;
}

StepResult CpuBackend::run(const StepBatch& batch, MoeState& moe_state) {
  const ModelSpec& s = store_->spec();
  c10::NoGradGuard no_grad;
  StepResult result;
  result.counts.assign(static_cast<std::size_t>(batch.sequences), std::vector<LayerCounts>(static_cast<std::size_t>(s.num_layers)));
  result.logits.resize(batch.chunks.size());
  result.routes.resize(static_cast<std::size_t>(batch.sequences));
  const StepLayout layout = lay_out(batch);
  if (layout.tokens == 0) return result;

  std::vector<std::int64_t> ids, positions;
  for (const StepChunk& c : batch.chunks) {
    for (std::int64_t id : c.tokens)
      if (id < 0 || id >= s.vocab_size)
        throw InvalidArgument("step", "token id " + std::to_string(id), "is outside the vocabulary [0, " + std::to_string(s.vocab_size) + ")");
    ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    for (std::int64_t p = c.start; p < c.start + static_cast<std::int64_t>(c.tokens.size()); ++p) positions.push_back(p);
  }
  const KvRows rows = kv_rows(batch, layout);
  const at::Tensor id_t = long_tensor(ids);
  const auto [cos, sin] = rotary(long_tensor(positions), inv_freq_, s.rope_scaling.attention_factor);  // [tokens, rope_dim]
  auto part = [](const at::Tensor& t, const StepLayout::Group& g) { return t.narrow(0, g.begin, g.end - g.begin); };

  at::Tensor x = at::empty({layout.tokens, s.hidden_size}, at::kFloat);
  for (const auto& g : layout.groups) part(x, g).copy_(weights(g.buffer).embed.index_select(0, part(id_t, g)));
  at::Tensor h = at::empty_like(x);
  at::Tensor q = at::empty({layout.tokens, s.num_heads, s.mla ? s.kv_cache_width() : s.head_dim}, at::kFloat);
  // One token alone (a request decoding by itself): each MoE layer is timed, for Multi-MoE's Table 1.
  const bool alone = layout.tokens == 1;
  std::size_t alone_sequence = 0;
  for (const StepChunk& c : batch.chunks)
    if (!c.tokens.empty()) alone_sequence = static_cast<std::size_t>(c.sequence);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const auto li = static_cast<std::size_t>(l);
    const auto layer_start = alone ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    for (const auto& g : layout.groups) {
      const LayerWeights& L = weights(g.buffer).layers[li];
      part(q, g).copy_(project_qkv(l, L, rms_norm_rows(part(x, g), L.input_norm, s.rms_norm_eps), part(cos, g), part(sin, g), part(rows.write, g)));
    }
    const at::Tensor attended = attend_all(l, q, batch, layout, rows);
    for (const auto& g : layout.groups) {
      const LayerWeights& L = weights(g.buffer).layers[li];
      at::Tensor xg = part(x, g);
      at::Tensor heads = part(attended, g);
      if (s.mla) {  // out of the latent's space through each head's W_UV: [n, nh·rkv] → [n, nh·dv]
        const std::int64_t n = g.end - g.begin;
        heads = at::bmm(heads.view({n, s.num_heads, s.mla->kv_lora_rank}).transpose(0, 1), L.w_uv.transpose(1, 2)).transpose(0, 1).reshape({n, s.o_width()});
      }
      xg.add_(project(heads, L.wo, L.bo));
      part(h, g).copy_(rms_norm_rows(xg, L.post_norm, s.rms_norm_eps));
    }
    if (s.is_sparse(l)) {
      const auto block_start = alone ? std::chrono::steady_clock::now() : layer_start;
      x.add_(moe(l, h, layout, moe_state, result));
      if (alone) {
        LayerCounts& c = result.counts[alone_sequence][li];
        c.add_alone(c.hits, std::chrono::duration<double>(block_start - layer_start).count(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - block_start).count());
      }
    } else {
      for (const auto& g : layout.groups) part(x, g).add_(swiglu(part(h, g), weights(g.buffer).layers[li].shared, true));
    }
    fail_non_finite(x, batch, layout, result, "layer " + std::to_string(l));
  }

  // Logits of the rows the chunks ask for, one projection per group.
  for (const auto& g : layout.groups) {
    std::vector<std::int64_t> wanted;
    for (std::size_t ci = g.first_chunk; ci < g.last_chunk; ++ci) {
      const StepChunk& c = batch.chunks[ci];
      const auto T = static_cast<std::int64_t>(c.tokens.size());
      if (c.emit == Emit::Last) wanted.push_back(layout.offset[ci] + T - 1);
      if (c.emit == Emit::All)
        for (std::int64_t t = 0; t < T; ++t) wanted.push_back(layout.offset[ci] + t);
    }
    if (wanted.empty()) continue;
    const ModelWeights& W = weights(g.buffer);
    const at::Tensor logits =
        project(rms_norm_rows(x.index_select(0, long_tensor(wanted)), W.final_norm, s.rms_norm_eps), W.lm_head).contiguous();
    const float* data = logits.data_ptr<float>();
    for (std::size_t ci = g.first_chunk; ci < g.last_chunk; ++ci) {
      const StepChunk& c = batch.chunks[ci];
      if (c.emit == Emit::Nothing) continue;
      Logits& out = result.logits[ci];
      out.vocab = s.vocab_size;
      out.rows = c.emit == Emit::Last ? 1 : static_cast<std::int64_t>(c.tokens.size());
      out.values.assign(data, data + out.rows * s.vocab_size);
      data += out.rows * s.vocab_size;
    }
  }
  return result;
}

}  // namespace mosaic::cpu
