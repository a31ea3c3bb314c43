#include "serving/session_views.h"

#include <map>

#include "analysis/cross_distance.h"
#include "common/error.h"
#include "model/synthetic.h"
#include "serving/hybrid_plan.h"

namespace mosaic {

DeltaLayoutView describe_deltas(const Session& session) {
  DeltaLayoutView v;
  v.can_plan = session.can_plan_hybrid();
  if (!v.can_plan) return v;
  const HostStore& store = session.store();
  const std::vector<int> folders = delta_folders_over(store, hybrid_base(store));
  v.folders = static_cast<int>(folders.size());
  v.total = static_cast<std::int64_t>(deltas_layer_major(store, folders).size());
  for (std::int64_t n : session.layout().plan.deltas) {
    v.resident += n;
    v.positions += n > 0;
  }
  // Resident deltas are charged as delta-only slots (from a layout file) or pins taken while room (planned).
  for (const DeviceItem& item : session.runtime().device_items())
    if (item.name.starts_with("delta-only slots") || item.name.starts_with("pinned while room")) v.packed_bytes += item.bytes;
  return v;
}

FamilyView describe_family(const Session& session) {
  const Family& family = session.family();
  const ModelSpec& s = family.spec();
  FamilyView info;
  info.layers = static_cast<int>(s.num_layers);
  info.experts = static_cast<int>(s.num_experts);
  info.top_k = static_cast<int>(s.top_k);
  info.distances_from_cache = session.analysis().from_cache;
  info.bytes_per_expert = device_bytes(family).per_expert;
  info.host_bytes = session.store().host_bytes();
  info.host_budget = session.store().tier().budget();
  for (const Variant& v : family.variants()) {
    const Checkpoint& ck = *v.checkpoint;
    VariantView vi;
    vi.name = v.name;
    vi.dir = ck.dir().string();
    vi.architecture = std::string(s.model_type()) + ": " + std::to_string(s.num_layers) + " layers × " +
                      std::to_string(s.num_experts) + " experts, top-" + std::to_string(s.top_k) + ", hidden " +
                      std::to_string(s.hidden_size);
    std::map<std::string, int> dtypes;
    for (const Weight& w : ck.weights()) ++dtypes[std::string(dtype_name(w.dtype))];
    for (const auto& [name, n] : dtypes) vi.dtypes += (vi.dtypes.empty() ? "" : ", ") + name;
    vi.parameters = parameter_count(s);
    vi.active_parameters = active_parameter_count(s);
    vi.bytes = ck.total_bytes();
    vi.non_expert_bytes = ck.non_expert_bytes();
    vi.adapter_experts = static_cast<int>(ck.adapter_experts().size());
    if (!ck.base_dir().empty()) vi.base = ck.base_dir().filename().string();
    if (ck.is_delta()) vi.delta = format_name(ck.delta_format());
    info.variants.push_back(std::move(vi));
  }
  return info;
}

Outcome<MatrixView> distance_matrix(const Session& session, MatrixView::Kind kind, int a, int b,
                                    std::optional<std::int64_t> layer) {
  return Outcome<MatrixView>::of([&]() -> Outcome<MatrixView> {
    const Family& family = session.family();
    const ExpertDistances& d = session.analysis().distances;
    const int n = static_cast<int>(family.size());
    if (kind != MatrixView::Kind::Position && (a < 0 || b < 0 || a >= n || b >= n || a == b))
      throw InvalidArgument("heatmap", "variants", "must be two different variants of the family", "choose two different variants");
    auto name = [&](int i) { return family.variants()[static_cast<std::size_t>(i)].name; };
    MatrixView h;
    h.kind = kind;
    if (kind == MatrixView::Kind::Cross) {
      auto cross = cross_position_distances(*family.variants()[static_cast<std::size_t>(a)].checkpoint,
                                            *family.variants()[static_cast<std::size_t>(b)].checkpoint, layer);
      if (cross.is_cancelled()) return Cancelled{};
      h.rows = h.columns = static_cast<int>(cross->size());
      h.values = std::move(cross->matrix);
      h.positions = std::move(cross->positions);
      h.title = "‖" + name(a) + "(l, e) − " + name(b) + "(l′, e′)‖" + (layer ? ", layer " + std::to_string(*layer) : "");
      h.row_label = name(a) + " position";
      h.column_label = name(b) + " position";
      return h;
    }
    h.rows = static_cast<int>(d.layers);
    h.columns = static_cast<int>(d.experts);
    for (std::int64_t l = 0; l < d.layers; ++l)
      for (std::int64_t e = 0; e < d.experts; ++e)
        h.values.push_back(kind == MatrixView::Kind::Position ? d.at(l, e) : d.pair(a, b, l, e));
    h.title = kind == MatrixView::Kind::Position ? "Position distance d(l, e) over " + std::to_string(n) + " variants"
                                                : "‖" + name(a) + " − " + name(b) + "‖ per position";
    h.row_label = "layer";
    h.column_label = "expert";
    return h;
  });
}

}  // namespace mosaic
