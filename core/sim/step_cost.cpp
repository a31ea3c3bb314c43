#include "sim/step_cost.h"

#include <algorithm>

namespace mosaic {
namespace {

// Kernels per part, as the backends launch them: a layer's attention (norm, q/k/v/o projections,
// rotary, residual) per resident-set group; scores, softmax and weighted sum over the paged KV
// cache, batched over the step's decode rows but per chunk for a prompt (its causal mask, its own
// gather of keys and values); an expert's gate, up, activation and down; the router's projection,
// softmax and top-k.
constexpr double kAttentionKernels = 12, kDecodeKernels = 2, kPromptKernels = 6, kExpertKernels = 4, kRouterKernels = 3,
                 kMlpKernels = 4;

}  // namespace

StepCost price_step(const ModelShapes& m, const DeviceProfile& d, const StepWork& w) {
  const ModelSpec& s = m.spec;
  const double cb = static_cast<double>(d.compute_bytes);
  StepCost cost;
  // One kernel: `bytes` read, `flops` done.
  auto kernel = [&](double bytes, double flops) {
    cost.bytes += bytes;
    cost.flops += flops;
    return std::max(bytes / d.memory_bandwidth, flops / d.peak_flops);
  };
  std::int64_t rows = 0;
  for (const auto& c : w.chunks) rows += c.tokens;
  const double t = static_cast<double>(rows), groups = static_cast<double>(w.groups);
  double& launches = cost.launches;
  cost.attention.resize(static_cast<std::size_t>(s.num_layers));
  cost.block.resize(static_cast<std::size_t>(s.num_layers));
  // Ends a part of a layer begun when the roofline and launches stood at `since`, charging it what
  // was added since; the block carries the per-row host cost (routing) of the layer.
  std::pair<double, double> since;
  auto end_part = [&](StepCost::Part& part, double host_rows) {
    part.roofline = cost.roofline - since.first;
    part.overhead = (launches - since.second) * d.launch_seconds + host_rows * d.row_seconds;
    since = {cost.roofline, launches};
  };
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const auto layer = static_cast<std::size_t>(l);
    since = {cost.roofline, launches};
    cost.roofline += kernel(groups * static_cast<double>(m.attention_params) * cb, 2 * t * static_cast<double>(m.attention_params));
    launches += kAttentionKernels * groups;
    bool decoding = false;
    // Per head, the widths a query meets its context in: keys and values of head_dim, or latent
    // attention's absorbed form, scores over [latent | rotary key] and values over the latent.
    const double score_width = static_cast<double>(s.mla ? s.kv_cache_width() : s.head_dim);
    const double value_width = static_cast<double>(s.mla ? s.mla->kv_lora_rank : s.head_dim);
    for (const auto& c : w.chunks) {  // keys and values of its context, read in the KV dtype (as computed)
      const double ctx = static_cast<double>(c.context);
      cost.roofline += kernel(ctx * static_cast<double>(s.kv_cache_width()) * cb,
                              2 * static_cast<double>(c.tokens) * ctx * static_cast<double>(s.num_heads) * (score_width + value_width));
      if (c.tokens > 1) launches += kPromptKernels;
      else decoding = true;
    }
    if (decoding) launches += kDecodeKernels;
    end_part(cost.attention[layer], 0);
    if (!s.is_sparse(l)) {
      cost.roofline += kernel(groups * static_cast<double>(m.dense_params) * cb, 2 * t * static_cast<double>(m.dense_params));
      launches += kMlpKernels * groups;
      end_part(cost.block[layer], t);
      continue;
    }
    cost.roofline += kernel(groups * static_cast<double>(m.router_params) * cb, 2 * t * static_cast<double>(m.router_params));
    launches += kRouterKernels;
    if (m.shared_params > 0) {
      cost.roofline += kernel(groups * static_cast<double>(m.shared_params) * cb, 2 * t * static_cast<double>(m.shared_params));
      launches += kMlpKernels * groups;
    }
    if (layer < w.expert_rows.size())
      for (std::int64_t r : w.expert_rows[layer]) {
        cost.roofline += kernel(static_cast<double>(m.expert_params) * cb, 2 * static_cast<double>(r) * static_cast<double>(m.expert_params));
        launches += kExpertKernels;
      }
    if (layer < w.delta_rows.size())  // the packed bytes read, and (an upper bound) a dense product's flops
      for (const StepWork::DeltaRows& d : w.delta_rows[layer]) {
        cost.roofline += kernel(static_cast<double>(d.bytes), 2 * static_cast<double>(d.rows) * static_cast<double>(m.expert_params));
        launches += kExpertKernels;
      }
    end_part(cost.block[layer], t);
  }
  cost.roofline += kernel(groups * static_cast<double>(m.head_params) * cb, 2 * static_cast<double>(w.emitted) * static_cast<double>(m.head_params));
  launches += groups;
  cost.row_layers = t * static_cast<double>(s.num_layers);
  cost.overhead = launches * d.launch_seconds + cost.row_layers * d.row_seconds + d.sync_seconds;
  return cost;
}

double copy_seconds(std::uint64_t bytes, double bytes_per_second, double slowdown, double setup_seconds) {
  return setup_seconds + static_cast<double>(bytes) / bytes_per_second * slowdown;
}

}  // namespace mosaic
