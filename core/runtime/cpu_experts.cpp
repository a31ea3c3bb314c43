// The CPU backend's expert compute for one wave of a layer's routing plan. A slot group runs its
// expert's SwiGLU over the tokens routed to it. Groups whose slots hold one base expert (the base
// itself and delta experts over it) run DeltaMoE's decoupled compute: the base's GEMMs once over
// all their tokens, and each delta's product, straight from its packed arrays, on its own tokens.
#include <ATen/Parallel.h>

#include <map>
#include <tuple>

#include "runtime/cpu_backend.h"
#include "runtime/cpu_ops.h"
#include "runtime/cpu_rows.h"
#include "runtime/delta_view.h"

namespace mosaic::cpu {
namespace {

// y_part += x_part · Δ̂ᵀ, straight into y's rows (which may be a column block of gate_up: stride
// y_part.stride(0)), in blocks of rows across the intra-op threads.
void add_delta(const at::Tensor& x_part, const PackedDelta& p, const DeltaFormat& f, at::Tensor y_part) {
  // The kernel reads x's rows packed and writes y's rows at a stride: both fp32, unit column stride.
  if (x_part.scalar_type() != at::kFloat || y_part.scalar_type() != at::kFloat || !x_part.is_contiguous() || y_part.stride(1) != 1 ||
      x_part.size(1) != p.cols || y_part.size(1) != p.rows || x_part.size(0) != y_part.size(0))
    throw std::logic_error("add_delta: activations and outputs do not match the packed delta's shape and layout");
  const kernels::DeltaView whole = delta_view(p, f);
  const float* x = x_part.data_ptr<float>();
  float* y = y_part.data_ptr<float>();
  const auto n = static_cast<int>(x_part.size(0));
  at::parallel_for(0, p.rows, 64, [&](std::int64_t r0, std::int64_t r1) {
    kernels::delta_linear_cpu(x, n, kernels::delta_rows(whole, r0, r1), /*accumulate=*/true, y + r0, y_part.stride(0));
  });
}

}  // namespace

void CpuBackend::run_groups(std::int64_t layer, const RouteWave& wave, const at::Tensor& h, std::span<const float> top_w,
                            std::int64_t k, at::Tensor& out) const {
  const auto l = static_cast<std::size_t>(layer);
  auto slots_of = [&](const SlotRef& s) -> const ExpertSlots& { return s.scratch ? scratch_ : slots_[l]; };

  // Groups by the base their slot holds, in wave order; without deltas, each group alone.
  std::vector<std::vector<const SlotGroup*>> bundles;
  bool any_delta = false;
  for (const SlotGroup& g : wave.groups) any_delta |= slots_of(g.slot).has_delta[static_cast<std::size_t>(g.slot.slot)] != 0;
  std::map<std::tuple<TensorId, TensorId, TensorId>, std::size_t> bundle_of;
  for (const SlotGroup& g : wave.groups) {
    std::size_t b = bundles.size();
    if (any_delta) {
      // What the backend loaded, not the pool's record: a scratch slot's record is its last wave's.
      const HostExpert& e = store_->expert_tensors(slots_of(g.slot).held[static_cast<std::size_t>(g.slot.slot)]);
      b = bundle_of.emplace(std::make_tuple(e.gate, e.up, e.down), bundles.size()).first->second;
    }
    if (b == bundles.size()) bundles.emplace_back();
    bundles[b].push_back(&g);
  }

  std::vector<std::int64_t> rows;
  std::vector<float> ws;
  for (const auto& groups : bundles) {
    rows.clear();
    ws.clear();
    std::vector<std::int64_t> begin;  // per group: its first row in the bundle
    for (const SlotGroup* g : groups) {
      begin.push_back(static_cast<std::int64_t>(rows.size()));
      for (std::int64_t p : g->pairs) {
        rows.push_back(p / k);
        ws.push_back(top_w[static_cast<std::size_t>(p)]);
      }
    }
    const ExpertSlots& first = slots_of(groups.front()->slot);
    const MlpWeights m = first.view(groups.front()->slot.slot);
    bool deltas = false;
    for (const SlotGroup* g : groups) deltas |= slots_of(g->slot).has_delta[static_cast<std::size_t>(g->slot.slot)] != 0;
    if (!deltas) {
      add_expert_rows(h, rows, ws, m, out);
      continue;
    }
    const auto n = static_cast<std::int64_t>(rows.size());
    const at::Tensor idx = at::from_blob(rows.data(), {n}, at::kLong);
    const at::Tensor x = h.index_select(0, idx);  // [n, H], contiguous
    at::Tensor gu = gate_up_product(x, m, /*batched=*/true);  // [n, 2I]: the base's GEMMs, once
    const std::int64_t I = gu.size(1) / 2;
    auto each_delta = [&](auto&& body) {
      for (std::size_t i = 0; i < groups.size(); ++i) {
        const ExpertSlots& from = slots_of(groups[i]->slot);
        const auto at = static_cast<std::size_t>(groups[i]->slot.slot);
        if (!from.has_delta[at]) continue;
        const std::int64_t b = begin[i], c = static_cast<std::int64_t>(groups[i]->pairs.size());
        body(from.delta[at], b, c);
      }
    };
    each_delta([&](const HostDelta& d, std::int64_t b, std::int64_t c) {
      add_delta(x.narrow(0, b, c), d.gate, d.format, gu.narrow(0, b, c).narrow(1, 0, I));
      add_delta(x.narrow(0, b, c), d.up, d.format, gu.narrow(0, b, c).narrow(1, I, I));
    });
    const at::Tensor a = gate_rows(gu);  // [n, I]
    at::Tensor y = project(a, m.down);  // [n, H]: the base's GEMM, once
    each_delta([&](const HostDelta& d, std::int64_t b, std::int64_t c) {
      add_delta(a.narrow(0, b, c), d.down, d.format, y.narrow(0, b, c));
    });
    const at::Tensor w = at::from_blob(ws.data(), {n, 1}, at::kFloat);
    out.index_add_(0, idx, y * w);
  }
}

}  // namespace mosaic::cpu
