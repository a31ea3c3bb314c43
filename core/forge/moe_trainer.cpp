#include "forge/moe_trainer.h"

#include <c10/core/GradMode.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <random>

#include "common/atomic_file.h"
#include "common/error.h"
#include "model/dtype_convert.h"
#include "model/safetensors.h"

namespace mosaic {

double learning_rate(const OptimizerConfig& c, std::int64_t step, std::int64_t total) {
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  const double span = std::max<std::int64_t>(1, total - c.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return c.lr * (c.min_lr_fraction + (1.0 - c.min_lr_fraction) * cosine);
}

struct Param {
  ExpectedTensor expected;
  at::Tensor value, m, v;  // fp32; m and v are AdamW's moments
  bool trainable = true;
};

struct MoeTrainer::Impl {
  ModelSpec spec;
  OptimizerConfig opt;
  std::vector<Param> params;  // expected_tensors(spec) order
  std::map<std::string, std::size_t> index;
  at::Tensor inv_freq;
  std::int64_t updates = 0;  // AdamW's bias-correction step count

  const at::Tensor& w(const std::string& name) const { return params[index.at(name)].value; }

  struct Output { at::Tensor loss, aux; };
  Output run(const at::Tensor& tokens, RouterStats* stats) const;
};

namespace {

void check_spec(const ModelSpec& s) {
  if (s.arch != Arch::Mixtral || s.qkv_bias || s.o_bias || s.qk_norm != QkNorm::None || s.shared_expert_intermediate ||
      s.num_sparse_layers() != s.num_layers || s.clip_qkv)
    throw UnsupportedError("forge", "model", "the trainer builds plain Mixtral models only (every layer MoE, no biases)");
}

at::Tensor autograd_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return w * (x * at::rsqrt(x.pow(2).mean(-1, true) + eps));
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  return x * cos + at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * sin;
}

std::unique_ptr<MoeTrainer::Impl> make_impl(const ModelSpec& spec, const OptimizerConfig& opt) {
  check_spec(spec);
  auto impl = std::make_unique<MoeTrainer::Impl>();
  impl->spec = spec;
  impl->opt = opt;
  impl->inv_freq = 1.0 / at::pow(spec.rope_theta, at::arange(0, spec.head_dim, 2, at::kLong).to(at::kFloat) / spec.head_dim);
  impl->inv_freq = impl->inv_freq.to(at::kFloat);
  for (const ExpectedTensor& e : expected_tensors(spec)) {
    impl->index[e.name] = impl->params.size();
    impl->params.push_back({e, at::zeros(e.shape, at::kFloat), at::zeros(e.shape, at::kFloat), at::zeros(e.shape, at::kFloat), true});
  }
  return impl;
}

}  // namespace

MoeTrainer::Impl::Output MoeTrainer::Impl::run(const at::Tensor& tokens, RouterStats* stats) const {
  const ModelSpec& s = spec;
  const WeightNames n(s);
  const std::int64_t B = tokens.size(0), T = tokens.size(1) - 1, H = s.hidden_size;
  const std::int64_t nh = s.num_heads, kvh = s.num_kv_heads, hd = s.head_dim, E = s.num_experts, K = s.top_k;
  const at::Tensor inputs = tokens.narrow(1, 0, T), targets = tokens.narrow(1, 1, T);
  at::Tensor x = w(n.embed()).index_select(0, inputs.reshape({-1})).view({B, T, H});

  const at::Tensor freqs = at::outer(at::arange(T, at::kFloat), inv_freq);
  const at::Tensor emb = at::cat({freqs, freqs}, -1);  // [T, hd]
  const at::Tensor cos = emb.cos(), sin = emb.sin();
  const at::Tensor mask = at::ones({T, T}, at::kBool).triu(1);  // true above the diagonal: the future
  at::Tensor aux = at::zeros({}, at::kFloat);

  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const at::Tensor h = autograd_rms_norm(x, w(n.input_norm(l)), s.rms_norm_eps);
    const at::Tensor q = rope(at::linear(h, w(n.attn(l, AttnPart::Q))).view({B, T, nh, hd}).transpose(1, 2), cos, sin);
    const at::Tensor k = rope(at::linear(h, w(n.attn(l, AttnPart::K))).view({B, T, kvh, hd}).transpose(1, 2), cos, sin)
                             .repeat_interleave(nh / kvh, 1);
    const at::Tensor v = at::linear(h, w(n.attn(l, AttnPart::V))).view({B, T, kvh, hd}).transpose(1, 2).repeat_interleave(nh / kvh, 1);
    const at::Tensor scores = (at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd)))
                                  .masked_fill(mask, -std::numeric_limits<float>::infinity());
    const at::Tensor attn = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({B, T, nh * hd});
    x = x + at::linear(attn, w(n.attn(l, AttnPart::O)));

    const at::Tensor x2 = autograd_rms_norm(x, w(n.post_norm(l)), s.rms_norm_eps).reshape({B * T, H});
    const at::Tensor probs = at::softmax(at::linear(x2, w(n.router(l))), -1);  // [N, E]
    auto [top_w, top_i] = probs.topk(K, -1);
    if (s.norm_topk_prob) top_w = top_w / top_w.sum(-1, true);
    const at::Tensor chosen = at::zeros({B * T, E}, at::kFloat).scatter_(1, top_i, 1.0);  // [N, E]
    // Mixtral's load-balancing loss: E · Σ_e (share of selections) · (mean router probability).
    aux = aux + static_cast<double>(E) * (chosen.mean(0) / static_cast<double>(K) * probs.mean(0)).sum();
    if (stats) {
      const at::Tensor g = probs.mean(0).contiguous(), r = chosen.mean(0).contiguous();
      stats->gate_score.emplace_back(g.data_ptr<float>(), g.data_ptr<float>() + E);
      stats->token_ratio.emplace_back(r.data_ptr<float>(), r.data_ptr<float>() + E);
    }
    const at::Tensor flat_w = top_w.reshape({-1});
    const at::Tensor flat_i = top_i.reshape({-1}).contiguous();
    std::vector<std::vector<std::int64_t>> slots(static_cast<std::size_t>(E));  // positions in flat_*
    const auto* ti = flat_i.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < flat_i.numel(); ++i) slots[static_cast<std::size_t>(ti[i])].push_back(i);
    at::Tensor out = at::zeros_like(x2);
    for (std::int64_t e = 0; e < E; ++e) {
      auto& sl = slots[static_cast<std::size_t>(e)];
      if (sl.empty()) continue;
      std::vector<std::int64_t> row_of(sl.size());
      for (std::size_t i = 0; i < sl.size(); ++i) row_of[i] = sl[i] / K;
      const at::Tensor pos = at::from_blob(sl.data(), {static_cast<std::int64_t>(sl.size())}, at::kLong).clone();
      const at::Tensor rows = at::from_blob(row_of.data(), {static_cast<std::int64_t>(row_of.size())}, at::kLong).clone();
      const at::Tensor xe = x2.index_select(0, rows);
      const at::Tensor y = at::linear(at::silu(at::linear(xe, w(n.expert(l, e, ExpertRole::Gate)))) *
                                          at::linear(xe, w(n.expert(l, e, ExpertRole::Up))),
                                      w(n.expert(l, e, ExpertRole::Down)));
      out = out.index_add(0, rows, y * flat_w.index_select(0, pos).unsqueeze(1));
    }
    x = x + out.view({B, T, H});
  }
  const at::Tensor logits = at::linear(autograd_rms_norm(x, w(n.final_norm()), s.rms_norm_eps), w(n.lm_head()));
  const at::Tensor loss = at::cross_entropy_loss(logits.reshape({B * T, s.vocab_size}), targets.reshape({-1}));
  return {loss, aux / static_cast<double>(s.num_layers)};
}

MoeTrainer::MoeTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MoeTrainer::~MoeTrainer() = default;
const ModelSpec& MoeTrainer::spec() const { return impl_->spec; }

std::unique_ptr<MoeTrainer> MoeTrainer::fresh(const ModelSpec& spec, std::uint64_t seed, const OptimizerConfig& opt) {
  auto impl = make_impl(spec, opt);
  std::mt19937_64 rng(seed);  // filled here rather than by ATen's generator: stable across versions
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const float out_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(spec.num_layers));
  for (Param& p : impl->params) {
    float* d = p.value.data_ptr<float>();
    const bool norm = p.expected.name.find("norm") != std::string::npos;
    const bool output = p.expected.name.find("o_proj") != std::string::npos ||
                        (p.expected.is_expert() && p.expected.role == ExpertRole::Down);
    for (std::int64_t i = 0; i < p.value.numel(); ++i) d[i] = norm ? 1.0f : normal(rng) * (output ? out_scale : 1.0f);
  }
  return std::unique_ptr<MoeTrainer>(new MoeTrainer(std::move(impl)));
}

std::unique_ptr<MoeTrainer> MoeTrainer::from_checkpoint(const Checkpoint& ck, const OptimizerConfig& opt) {
  auto impl = make_impl(ck.spec(), opt);
  for (Param& p : impl->params) {
    WeightFloats(ck, ck.weight(p.expected.name)).read(0, std::span<float>(p.value.data_ptr<float>(), static_cast<std::size_t>(p.value.numel())));
  }
  return std::unique_ptr<MoeTrainer>(new MoeTrainer(std::move(impl)));
}

void MoeTrainer::set_trainable(const TensorFilter& trainable) {
  for (Param& p : impl_->params) p.trainable = !trainable || trainable(p.expected);
}

namespace {

at::Tensor token_tensor(std::span<const std::int32_t> tokens, std::int64_t rows, std::int64_t vocab) {
  if (rows <= 0 || tokens.size() % static_cast<std::size_t>(rows) != 0 || tokens.size() / static_cast<std::size_t>(rows) < 2)
    throw InvalidArgument("trainer", "batch", std::to_string(tokens.size()) + " tokens do not make " + std::to_string(rows) +
                                                 " rows of at least 2");
  for (std::int32_t t : tokens)
    if (t < 0 || t >= vocab) throw InvalidArgument("trainer", "token " + std::to_string(t), "is outside the vocabulary");
  return at::from_blob(const_cast<std::int32_t*>(tokens.data()), {rows, static_cast<std::int64_t>(tokens.size()) / rows}, at::kInt)
      .to(at::kLong);
}

}  // namespace

MoeTrainer::StepResult MoeTrainer::step(std::span<const std::int32_t> tokens, std::int64_t rows, double lr) {
  Impl& m = *impl_;
  const at::Tensor batch = token_tensor(tokens, rows, m.spec.vocab_size);
  for (Param& p : m.params) {
    p.value.requires_grad_(p.trainable);
    if (p.value.grad().defined()) p.value.mutable_grad() = at::Tensor();
  }
  const Impl::Output out = m.run(batch, nullptr);
  const at::Tensor total = out.loss + m.opt.aux_loss_coef * out.aux;
  total.backward();

  c10::NoGradGuard no_grad;
  double norm2 = 0;
  for (Param& p : m.params)
    if (p.trainable && p.value.grad().defined()) norm2 += p.value.grad().pow(2).sum().item<double>();
  const double norm = std::sqrt(norm2);
  const double clip = norm > m.opt.grad_clip ? m.opt.grad_clip / norm : 1.0;
  ++m.updates;
  const double bc1 = 1.0 - std::pow(m.opt.beta1, static_cast<double>(m.updates));
  const double bc2 = 1.0 - std::pow(m.opt.beta2, static_cast<double>(m.updates));
  for (Param& p : m.params) {
    if (!p.trainable || !p.value.grad().defined()) continue;
    const at::Tensor g = p.value.grad() * clip;
    p.m.mul_(m.opt.beta1).add_(g, 1.0 - m.opt.beta1);
    p.v.mul_(m.opt.beta2).addcmul_(g, g, 1.0 - m.opt.beta2);
    // Decoupled weight decay on matrices only: norms stay near 1.
    if (p.value.dim() > 1) p.value.mul_(1.0 - lr * m.opt.weight_decay);
    p.value.addcdiv_(p.m / bc1, (p.v / bc2).sqrt_().add_(m.opt.eps), -lr);
  }
  for (Param& p : m.params) {
    p.value.mutable_grad() = at::Tensor();
    p.value.requires_grad_(false);
  }
  return {out.loss.item<double>(), out.aux.item<double>(), norm};
}

double MoeTrainer::loss(std::span<const std::int32_t> tokens, std::int64_t rows) const {
  c10::NoGradGuard no_grad;
  return impl_->run(token_tensor(tokens, rows, impl_->spec.vocab_size), nullptr).loss.item<double>();
}

RouterStats MoeTrainer::router_stats(std::span<const std::int32_t> tokens, std::int64_t rows) const {
  c10::NoGradGuard no_grad;
  RouterStats stats;
  impl_->run(token_tensor(tokens, rows, impl_->spec.vocab_size), &stats);
  return stats;
}

void MoeTrainer::save_checkpoint(const std::filesystem::path& dir, DType dtype, const TensorFilter& include) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string(), "", "cannot create folder: " + ec.message());
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorBytes> tensors;
  storage.reserve(impl_->params.size());
  for (const Param& p : impl_->params) {
    if (include && !include(p.expected)) continue;
    const at::Tensor v = p.value.contiguous();
    auto& buf = storage.emplace_back(static_cast<std::size_t>(v.numel()) * dtype_size(dtype));
    from_float(dtype, std::span<const float>(v.data_ptr<float>(), static_cast<std::size_t>(v.numel())), buf.data());
    tensors.push_back({p.expected.name, dtype, p.expected.shape, buf});
  }
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  const std::string config = to_config_json(impl_->spec);
  write_file_atomically(dir / "config.json", [&](std::ostream& out) { out << config; });
}

void MoeTrainer::save_state(const std::filesystem::path& file, std::int64_t step) const {
  std::vector<TensorBytes> tensors;
  for (const Param& p : impl_->params)
    for (const auto& [prefix, t] : {std::pair{"value.", &p.value}, std::pair{"adam_m.", &p.m}, std::pair{"adam_v.", &p.v}})
      tensors.push_back({prefix + p.expected.name, DType::F32, p.expected.shape,
                         std::as_bytes(std::span<const float>(t->data_ptr<float>(), static_cast<std::size_t>(t->numel())))});
  write_safetensors(file, tensors, {{"step", std::to_string(step)}, {"updates", std::to_string(impl_->updates)}});
}

std::int64_t MoeTrainer::load_state(const std::filesystem::path& file) {
  const SafetensorsFile f(file);
  for (Param& p : impl_->params)
    for (const auto& [prefix, t] : {std::pair{"value.", &p.value}, std::pair{"adam_m.", &p.m}, std::pair{"adam_v.", &p.v}}) {
      const TensorInfo* info = f.find(prefix + p.expected.name);
      if (!info || info->dtype != DType::F32 || info->shape != p.expected.shape)
        throw MismatchError(file.string(), prefix + p.expected.name, "is absent or of another shape than the recipe's model",
                            "delete the state file to start this stage afresh");
      std::memcpy(t->data_ptr<float>(), f.data(*info).data(), info->nbytes());
    }
  try {
    impl_->updates = std::stoll(f.metadata().at("updates"));
    return std::stoll(f.metadata().at("step"));
  } catch (const std::exception&) {
    throw FormatError(file.string(), "metadata", "lacks the step reached", "delete the state file to start this stage afresh");
  }
}

}  // namespace mosaic
