#include "runtime/store_map.h"

#include "common/error.h"

namespace mosaic {

StoreMap map_store(const HostStore& from, const HostStore& to) {
  const ModelSpec& s = from.spec();
  const ModelSpec& n = to.spec();
  if (s.num_layers != n.num_layers || s.num_experts != n.num_experts || from.non_expert_names() != to.non_expert_names())
    throw MismatchError("family", "architecture", "the next family is not of the architecture served", "serve it from a fresh start");
  StoreMap m;
  m.target.assign(static_cast<std::size_t>(from.targets()), -1);
  m.expert.assign(static_cast<std::size_t>(from.distinct_experts()), -1);
  m.tensor.assign(static_cast<std::size_t>(from.distinct_tensors()), -1);
  m.set.assign(static_cast<std::size_t>(from.sets()), -1);
  m.delta.assign(static_cast<std::size_t>(from.deltas()), -1);
  auto tensor = [&](TensorId a, TensorId b) {
    if (a >= 0) m.tensor[static_cast<std::size_t>(a)] = b;
  };
  for (int t = 0; t < from.targets(); ++t) {
    const int u = to.index(from.name(t));
    if (u < 0) continue;
    m.target[static_cast<std::size_t>(t)] = u;
    const int a = from.set_of(t), b = to.set_of(u);
    m.set[static_cast<std::size_t>(a)] = b;
    const std::vector<TensorId>& ta = from.set_tensors(a);
    const std::vector<TensorId>& tb = to.set_tensors(b);
    for (std::size_t i = 0; i < ta.size() && i < tb.size(); ++i) tensor(ta[i], tb[i]);
    for (std::int64_t l = 0; l < s.num_layers; ++l) {
      if (!s.is_sparse(l)) continue;
      for (std::int64_t e = 0; e < s.num_experts; ++e) {
        const ExpertId x = from.expert(t, l, e), y = to.expert(u, l, e);
        if (x < 0 || y < 0) continue;
        m.expert[static_cast<std::size_t>(x)] = y;
        const HostExpert& hx = from.expert_tensors(x);
        const HostExpert& hy = to.expert_tensors(y);
        tensor(hx.gate, hy.gate);
        tensor(hx.up, hy.up);
        tensor(hx.down, hy.down);
        if (hx.delta >= 0) m.delta[static_cast<std::size_t>(hx.delta)] = hy.delta;
        if (hx.dense >= 0 && hy.dense >= 0) m.expert[static_cast<std::size_t>(hx.dense)] = hy.dense;
      }
    }
  }
  return m;
}

}  // namespace mosaic
