#include "runtime/cuda/step_inputs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "common/error.h"
#include "model/rope.h"
#include "runtime/step_layout.h"

namespace mosaic::cuda {

std::vector<float> inverse_frequencies(const ModelSpec& s) {
  std::vector<float> f;
  if (s.rope_scaling.kind != RopeKind::Default) {  // YaRN, Llama 3.1: computed in double, rounded
    for (double v : rope_inverse_frequencies(s)) f.push_back(static_cast<float>(v));
    return f;
  }
  const std::int64_t d = s.rope_dim();  // MLA turns only its rotary part
  for (std::int64_t i = 0; i < d; i += 2)
    // In float, as the CPU backend's at::pow on a float tensor computes it.
    f.push_back(1.0f / std::pow(static_cast<float>(s.rope_theta), static_cast<float>(i) / static_cast<float>(d)));
  return f;
}

std::optional<std::string> cuda_unsupported(const ModelSpec& s) {
  std::string missing;
  auto lacks = [&](bool yes, const std::string& what) {
    if (yes) missing += (missing.empty() ? "" : ", ") + what;
  };
  if (s.mla) {
    const kernels::LatentShape shape = latent_shape(s);
    lacks(!kernels::latent_shape_valid(shape),
          "latent attention rows wider than " + std::to_string(kernels::kMaxLatentRow) + " or of odd widths");
    lacks(s.clip_qkv.has_value() || s.qk_norm != QkNorm::None, "q/k norms or clipping beside latent attention");
  }
  lacks(s.rope_interleaved && !s.mla, "interleaved rotary pairs outside latent attention");
  lacks(s.num_experts > kernels::kRouterMaxExperts, "more than " + std::to_string(kernels::kRouterMaxExperts) + " experts");
  lacks(s.num_experts > 0 && !plain_router(s) && !kernels::router_rule_valid(router_rule(s, nullptr), static_cast<int>(s.num_experts), static_cast<int>(s.top_k)),
        "expert groups the device router does not take (at most " + std::to_string(kernels::kRouterMaxGroups) + ", dividing the experts)");
  if (missing.empty()) return std::nullopt;
  return std::string(s.model_type()) + " needs what the CUDA backend does not implement yet (" + missing + ")";
}

bool plain_router(const ModelSpec& s) {
  return s.router_scoring == RouterScoring::Softmax && s.expert_choice == ExpertChoice::TopK && s.routed_scaling_factor == 1.0;
}

kernels::RouterRule router_rule(const ModelSpec& s, const float* bias) {
  kernels::RouterRule r;
  const bool sigmoid = s.router_scoring == RouterScoring::Sigmoid;
  r.scores = sigmoid ? kernels::RouterScores::Sigmoid : kernels::RouterScores::Softmax;
  // As core's route_tokens reads the spec: sigmoid scores rank groups by their two best, softmax ones
  // by their best (GroupMax); a softmax with any other choice takes the plain top-k.
  if (s.expert_choice != ExpertChoice::TopK && (sigmoid || s.expert_choice == ExpertChoice::GroupMax))
    r.groups = sigmoid ? kernels::GroupRank::TopTwoSum : kernels::GroupRank::BestScore;
  r.n_group = static_cast<int>(s.n_group);
  r.topk_group = static_cast<int>(s.topk_group);
  r.renormalize = s.norm_topk_prob;
  r.scale = static_cast<float>(s.routed_scaling_factor);
  r.bias = sigmoid ? bias : nullptr;
  return r;
}

kernels::LatentShape latent_shape(const ModelSpec& s) {
  const LatentAttention& a = *s.mla;
  return {static_cast<int>(s.num_heads), static_cast<int>(a.nope_dim), static_cast<int>(a.rope_dim), static_cast<int>(a.v_dim),
          static_cast<int>(a.kv_lora_rank), s.rope_interleaved};
}

StepInputs step_inputs(const StepBatch& batch, const ModelSpec& s, const std::vector<float>& inv_freq,
                       std::int64_t block_tokens) {
  StepInputs in;
  {  // the host's view of the step, as every backend lays it out
    StepLayout layout = lay_out(batch);
    in.sequence = std::move(layout.sequence);
    in.traced = std::move(layout.traced);
    in.first = std::move(layout.first);
    in.any_traced = layout.any_traced;
  }
  std::set<std::int32_t> rows;
  for (const StepChunk& c : batch.chunks) {
    const auto n = static_cast<std::int64_t>(c.tokens.size());
    in.offset.push_back(in.tokens);
    if (static_cast<std::int64_t>(c.blocks.size()) * block_tokens < c.start + n)
      throw InvalidArgument("step", "KV blocks", "hold fewer positions than the chunk reaches");
    if (in.groups.empty() || in.groups.back().buffer != c.buffer) in.groups.push_back({c.buffer, in.tokens, in.tokens, 0, 0});
    const auto block_offset = static_cast<std::int32_t>(in.blocks.size());
    in.blocks.insert(in.blocks.end(), c.blocks.begin(), c.blocks.end());
    for (std::int32_t b : c.blocks) in.highest_block = std::max<std::int64_t>(in.highest_block, b);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t id = c.tokens[static_cast<std::size_t>(i)];
      if (id < 0 || id >= s.vocab_size)
        throw InvalidArgument("step", "token id " + std::to_string(id), "is outside the vocabulary [0, " + std::to_string(s.vocab_size) + ")");
      const std::int64_t p = c.start + i;
      in.ids.push_back(static_cast<std::int32_t>(id));
      in.rows.push_back(c.target);
      in.positions.push_back(static_cast<std::int32_t>(p));
      in.block_offset.push_back(block_offset);
      for (float f : inv_freq) in.cos.push_back(static_cast<float>(p) * f);  // angles; cos/sin below
    }
    rows.insert(c.target);
    in.max_positions = std::max<std::int32_t>(in.max_positions, static_cast<std::int32_t>(c.start + n));
    in.tokens += n;
    in.groups.back().end = in.tokens;
  }
  // [tokens, hd/2] angles → cos and sin of [angles, angles] (transformers' cat((freqs, freqs))).
  const std::size_t half = inv_freq.size();
  const auto factor = static_cast<float>(s.rope_scaling.attention_factor);  // YaRN's: 1 otherwise
  std::vector<float> angles = std::move(in.cos);
  in.cos.assign(static_cast<std::size_t>(in.tokens) * 2 * half, 0.0f);
  in.sin = in.cos;
  for (std::size_t t = 0; t < static_cast<std::size_t>(in.tokens); ++t)
    for (std::size_t i = 0; i < half; ++i) {
      const float a = angles[t * half + i];
      in.cos[t * 2 * half + i] = in.cos[t * 2 * half + half + i] = factor == 1.0f ? std::cos(a) : std::cos(a) * factor;
      in.sin[t * 2 * half + i] = in.sin[t * 2 * half + half + i] = factor == 1.0f ? std::sin(a) : std::sin(a) * factor;
    }
  for (TokenGroup& g : in.groups) {
    g.wanted_begin = static_cast<std::int64_t>(in.wanted.size());
    for (std::size_t ci = 0; ci < batch.chunks.size(); ++ci) {
      if (in.offset[ci] < g.begin || in.offset[ci] >= g.end) continue;
      const StepChunk& c = batch.chunks[ci];
      const auto n = static_cast<std::int64_t>(c.tokens.size());
      if (c.emit == Emit::Last && n > 0) {
        if (c.draw_temperature && !(std::isfinite(*c.draw_temperature) && *c.draw_temperature >= 0))
          throw InvalidArgument("step", "draw temperature " + std::to_string(*c.draw_temperature), "must be 0 (greedy) or positive");
        in.wanted.push_back(static_cast<std::int32_t>(in.offset[ci] + n - 1));
        in.temperature.push_back(c.draw_temperature.value_or(-1.0));
      }
      if (c.emit == Emit::All)
        for (std::int64_t t = 0; t < n; ++t) {
          in.wanted.push_back(static_cast<std::int32_t>(in.offset[ci] + t));
          in.temperature.push_back(-1.0);
        }
    }
    g.wanted_end = static_cast<std::int64_t>(in.wanted.size());
  }
  in.distinct_rows.assign(rows.begin(), rows.end());
  return in;
}

bool StepInputs::whole_rows() const {
  return std::any_of(temperature.begin(), temperature.end(), [](double t) { return t < 0; });
}
bool StepInputs::draws() const {
  return std::any_of(temperature.begin(), temperature.end(), [](double t) { return t >= 0; });
}

std::int64_t StepInputs::sampled_rows() const {
  for (auto r = static_cast<std::int64_t>(temperature.size()); r > 0; --r)
    if (temperature[static_cast<std::size_t>(r - 1)] > 0) return r;
  return 0;
}

DrawLayout draw_layout(std::int64_t wanted, int candidates) {
  const auto w = static_cast<std::size_t>(wanted);
  DrawLayout d;
  d.normaliser = 0;  // doubles first, and the keys at an 8-byte boundary: every array stays aligned
  d.max_logit = d.normaliser + w * sizeof(double);
  d.first_max = d.max_logit + w * sizeof(float);
  d.keys = (d.first_max + w * sizeof(std::int32_t) + 7) / 8 * 8;
  d.key_row = static_cast<std::size_t>(candidates) * sizeof(std::uint64_t);
  d.bytes = d.bytes_through(wanted);
  return d;
}

namespace {

// Arrays placed at offsets sized by `room` (element counts per array, in pack order), filled from `in`.
PackedInputs pack_with(const StepInputs& in, const std::array<std::size_t, 9>& room) {
  PackedInputs p{};
  std::size_t at = 0;
  std::size_t* offsets[] = {&p.ids, &p.rows, &p.positions, &p.block_offset, &p.blocks, &p.wanted, &p.cos, &p.sin, &p.temperature};
  for (std::size_t i = 0; i < room.size(); ++i) {
    *offsets[i] = at;
    const std::size_t element = i + 1 == room.size() ? sizeof(double) : 4;  // temperatures are doubles, the rest 4 bytes
    at += (room[i] * element + 255) / 256 * 256;
  }
  p.bytes.assign(at, std::byte{0});
  auto put = [&](std::size_t offset, const auto& v) {
    if (!v.empty()) std::memcpy(p.bytes.data() + offset, v.data(), v.size() * sizeof(v[0]));
  };
  put(p.ids, in.ids);
  put(p.rows, in.rows);
  put(p.positions, in.positions);
  put(p.block_offset, in.block_offset);
  put(p.blocks, in.blocks);
  put(p.wanted, in.wanted);
  put(p.cos, in.cos);
  put(p.sin, in.sin);
  put(p.temperature, in.temperature);
  return p;
}

}  // namespace

PackedInputs pack(const StepInputs& in) {
  return pack_with(in, {in.ids.size(), in.rows.size(), in.positions.size(), in.block_offset.size(), in.blocks.size(),
                        in.wanted.size(), in.cos.size(), in.sin.size(), in.temperature.size()});
}

PackedInputs pack_fixed(const StepInputs& in, std::int64_t tokens, std::int64_t blocks, std::int64_t head_dim) {
  if (in.tokens > tokens || static_cast<std::int64_t>(in.blocks.size()) > blocks)
    throw InvalidArgument("step", std::to_string(in.tokens) + " tokens over " + std::to_string(in.blocks.size()) + " blocks",
                          "do not fit the fixed input layout of " + std::to_string(tokens) + " tokens and " + std::to_string(blocks) + " blocks");
  const auto t = static_cast<std::size_t>(tokens);
  return pack_with(in, {t, t, t, t, static_cast<std::size_t>(blocks), t, t * static_cast<std::size_t>(head_dim), t * static_cast<std::size_t>(head_dim), t});
}

StepInputs::Device device_inputs(const std::byte* d, const PackedInputs& packed) {
  auto ints = [&](std::size_t off) { return reinterpret_cast<const std::int32_t*>(d + off); };
  return {ints(packed.ids), ints(packed.rows), ints(packed.positions), ints(packed.block_offset), ints(packed.blocks),
          ints(packed.wanted), reinterpret_cast<const float*>(d + packed.cos), reinterpret_cast<const float*>(d + packed.sin),
          reinterpret_cast<const double*>(d + packed.temperature)};
}

}  // namespace mosaic::cuda
