#include "analysis/layout.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_fields.h"
#include "common/json_int.h"
#include "common/json_text.h"
#include "common/text_file.h"

namespace mosaic {
namespace {

using json = nlohmann::json;
constexpr const char* kRemake = "re-create it with `mosaic-cli consolidate`";
// Ranks and the capacity count expert positions: layers × experts × variants stays far below this.
constexpr std::int64_t kMaxCells = std::int64_t{1} << 40;

template <class T, class F>
json grid(const ConsolidationPlan& p, const std::vector<T>& cells, F&& cell) {
  json rows = json::array();
  for (std::int64_t l = 0; l < p.layers; ++l) {
    json row = json::array();
    for (std::int64_t e = 0; e < p.experts; ++e) row.push_back(cell(cells[static_cast<std::size_t>(l * p.experts + e)]));
    rows.push_back(std::move(row));
  }
  return rows;
}

// Reads fields of a layout file, turning every type or shape problem into a FormatError naming it.
class Reader {
 public:
  Reader(std::string file, const json& root) : file_(std::move(file)), root_(root) {}

  const json& get(const json& obj, const std::string& key, json::value_t type, const std::string& what) const {
    if (!obj.contains(key)) throw FormatError(file_, "field '" + key + "'", "is missing", kRemake);
    const json& v = obj[key];
    const bool ok = v.type() == type || (type == json::value_t::number_integer && v.is_number_unsigned()) ||
                    (type == json::value_t::number_float && v.is_number());
    if (!ok) throw FormatError(file_, "field '" + key + "'", "must be " + what, kRemake);
    return v;
  }

  // An L × E grid of numbers; `cell` converts one (null allowed only when `allow_null`).
  template <class T, class F>
  std::vector<T> grid(const std::string& key, std::int64_t layers, std::int64_t experts, F&& cell) const {
    const json& rows = get(root_, key, json::value_t::array, "an array of layers");
    if (static_cast<std::int64_t>(rows.size()) != layers)
      throw FormatError(file_, "field '" + key + "'",
                        "has " + std::to_string(rows.size()) + " layers where 'map' has " + std::to_string(layers),
                        kRemake);
    std::vector<T> out;
    for (std::int64_t l = 0; l < layers; ++l) {
      const json& row = rows[static_cast<std::size_t>(l)];
      if (!row.is_array() || static_cast<std::int64_t>(row.size()) != experts)
        throw FormatError(file_, "field '" + key + "[" + std::to_string(l) + "]'",
                          "must be an array of " + std::to_string(experts) + " experts", kRemake);
      for (std::int64_t e = 0; e < experts; ++e) {
        const std::string where = key + "[" + std::to_string(l) + "][" + std::to_string(e) + "]";
        out.push_back(cell(row[static_cast<std::size_t>(e)], where));
      }
    }
    return out;
  }

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw FormatError(file_, "field '" + field + "'", problem, kRemake);
  }

  // Typed reads of `obj`'s fields (named `prefix` + key), failing as fail() does.
  JsonFields fields(const json& obj, std::string prefix) const {
    return JsonFields(obj, [this](const std::string& field, const std::string& problem, bool) { fail(field, problem); }, std::move(prefix));
  }

 private:
  std::string file_;
  const json& root_;
};

nlohmann::ordered_json virtual_json(const VirtualLayout& v) {
  nlohmann::ordered_json j;
  j["counts"] = v.counts;
  j["initial"] = nlohmann::ordered_json::array();
  for (const auto& layer : v.initial) {
    nlohmann::ordered_json row = nlohmann::ordered_json::array();
    for (const auto& [variant, expert] : layer) row.push_back(nlohmann::ordered_json::array({variant, expert}));
    j["initial"].push_back(std::move(row));
  }
  j["staging"] = v.staging;
  j["update_every"] = v.update_every;
  j["decay"] = v.decay;
  j["shift"] = v.shift;
  const VirtualLayout::Planner& p = v.planner;
  j["planner"] = {{"calibration_tokens", p.calibration_tokens}, {"full_nll", p.full_nll},         {"objective", p.objective},
                  {"uniform_count", p.uniform_count},           {"uniform_objective", p.uniform_objective},
                  {"planned_nll", p.planned_nll},               {"uniform_nll", p.uniform_nll},
                  {"first_count", p.first_count},               {"loss", p.loss}};
  return j;
}

// The "virtual" section, checked against the map: every count within the layer's experts (0 in a
// layer the map leaves empty), each variant's initial set exactly that many distinct experts, and
// the map showing those positions.
VirtualLayout virtual_from_json(const Reader& r, const json& v, const ConsolidationPlan& p) {
  using T = json::value_t;
  if (!v.is_object()) r.fail("virtual", "must be an object");
  VirtualLayout out;
  const json& counts = r.get(v, "counts", T::array, "an array of per-layer counts");
  if (static_cast<std::int64_t>(counts.size()) != p.layers)
    r.fail("virtual.counts", "has " + std::to_string(counts.size()) + " layers where 'map' has " + std::to_string(p.layers));
  for (const json& c : counts) {
    if (!json_int_in(c, 0, p.experts)) r.fail("virtual.counts", "must hold counts from 0 to " + std::to_string(p.experts));
    out.counts.push_back(c.get<std::int64_t>());
  }
  const json& initial = r.get(v, "initial", T::array, "an array of layers");
  if (static_cast<std::int64_t>(initial.size()) != p.layers) r.fail("virtual.initial", "must have one list per layer");
  std::vector<int> shown(static_cast<std::size_t>(p.layers * p.experts), -1);
  for (std::int64_t l = 0; l < p.layers; ++l) {
    const std::string where = "virtual.initial[" + std::to_string(l) + "]";
    const json& layer = initial[static_cast<std::size_t>(l)];
    if (!layer.is_array()) r.fail(where, "must be an array of [variant, expert] pairs");
    std::set<std::pair<int, std::int64_t>> seen;
    std::vector<std::int64_t> per_variant(static_cast<std::size_t>(p.variants), 0);
    auto& pairs = out.initial.emplace_back();
    for (const json& pair : layer) {
      if (!pair.is_array() || pair.size() != 2 || !json_int_in(pair[0], 0, p.variants - 1) || !json_int_in(pair[1], 0, p.experts - 1))
        r.fail(where, "must hold [variant index, expert] pairs within the layout's variants and experts");
      const int variant = pair[0].get<int>();
      const std::int64_t expert = pair[1].get<std::int64_t>();
      if (!seen.emplace(variant, expert).second) r.fail(where, "lists variant " + std::to_string(variant) + "'s expert " + std::to_string(expert) + " twice");
      ++per_variant[static_cast<std::size_t>(variant)];
      pairs.emplace_back(variant, expert);
      int& cell = shown[static_cast<std::size_t>(l * p.experts + expert)];
      if (cell < 0 || variant < cell) cell = variant;
    }
    for (std::int64_t n : per_variant)
      if (n != out.counts[static_cast<std::size_t>(l)])
        r.fail(where, "must list " + std::to_string(out.counts[static_cast<std::size_t>(l)]) + " experts of every variant (virtual.counts), not " +
                          std::to_string(n));
  }
  if (shown != p.map) r.fail("map", "must show the virtual experts' initial set: at each position the first variant listed there");
  const JsonFields f = r.fields(v, "virtual.");
  out.staging = f.integer("staging", 0, p.experts);
  out.update_every = f.integer("update_every", 1, std::int64_t{1} << 40);
  out.decay = f.number("decay", 0, 1, std::nullopt, /*min_open=*/true);
  out.shift = f.number("shift", 0, 1, std::nullopt, /*min_open=*/true);
  if (v.contains("planner") && v["planner"].is_object()) {
    // What the planner measured: for people and reports, not needed to serve.
    const json& m = v["planner"];
    VirtualLayout::Planner& pl = out.planner;
    auto number = [&](const char* key) { return m.contains(key) && m[key].is_number() ? m[key].get<double>() : 0.0; };
    auto count = [&](const char* key) { return json_int_in(m.value(key, json()), 0, kMaxCells) ? m[key].get<std::int64_t>() : std::int64_t{0}; };
    pl.calibration_tokens = count("calibration_tokens");
    pl.full_nll = number("full_nll");
    pl.objective = number("objective");
    pl.uniform_count = count("uniform_count");
    pl.uniform_objective = number("uniform_objective");
    pl.planned_nll = number("planned_nll");
    pl.uniform_nll = number("uniform_nll");
    pl.first_count = count("first_count");
    if (m.contains("loss") && m["loss"].is_array())
      for (const json& row : m["loss"]) {
        auto& curve = pl.loss.emplace_back();
        if (row.is_array())
          for (const json& x : row) curve.push_back(x.is_number() ? x.get<double>() : 0.0);
      }
  }
  return out;
}

}  // namespace

int Layout::variant_index(const std::string& name) const {
  for (std::size_t i = 0; i < variants.size(); ++i)
    if (variants[i].name == name) return static_cast<int>(i);
  return -1;
}

Layout make_layout(const Family& family, const std::vector<std::string>& sha256, ConsolidationPlan plan) {
  Layout layout;
  for (std::size_t i = 0; i < family.size(); ++i) {
    const Variant& v = family.variants()[i];
    layout.variants.push_back({v.name, std::filesystem::absolute(v.checkpoint->dir()).lexically_normal().string(), sha256.at(i)});
  }
  layout.plan = std::move(plan);
  return layout;
}

void save_layout(const Layout& layout, const std::filesystem::path& path) {
  const ConsolidationPlan& p = layout.plan;
  nlohmann::ordered_json j;  // fields in the order people read them: schema first
  j["schema"] = Layout::kSchema;
  j["variants"] = json::array();
  for (const LayoutVariant& v : layout.variants) j["variants"].push_back({{"name", v.name}, {"path", v.path}, {"sha256", v.sha256}});
  j["budget_bytes"] = layout.budget_bytes ? json(*layout.budget_bytes) : json(nullptr);
  j["reserve"] = json::array();
  for (const ReserveItem& r : layout.reserve) j["reserve"].push_back({{"name", r.name}, {"bytes", r.bytes}, {"detail", r.detail}});
  if (const auto& r = layout.reserve_spec)
    j["reserve_spec"] = {{"context_tokens", r->context_tokens}, {"requests", r->requests}, {"prefill_chunk", r->prefill_chunk},
                         {"miss_slots", r->miss_slots}, {"kv_bytes", r->kv_bytes}};
  j["capacity"] = p.capacity;
  j["policy"] = std::string(policy_name(p.policy));
  j["shares"] = p.shares;
  j["resident_per_variant"] = p.resident_counts();
  j["map"] = grid(p, p.map, [](int v) { return json(v); });
  j["rank"] = grid(p, p.rank, [](std::int64_t r) { return json(r); });
  j["distance"] = grid(p, p.distance, [](double d) { return std::isnan(d) ? json(nullptr) : json(d); });
  if (!p.deltas.empty()) j["deltas"] = grid(p, p.deltas, [](std::int64_t n) { return json(n); });
  if (layout.virtual_experts) j["virtual"] = virtual_json(*layout.virtual_experts);
  const std::string text = j.dump(1);
  write_file_atomically(path, [&](std::ostream& out) { out << text << "\n"; });
}

Layout load_layout(const std::filesystem::path& path) {
  return parse_layout(read_text_file(path, "check the path of the layout file"), path.string());
}

namespace {

Layout layout_from_json(const json& root, const std::string& file) {
  if (!root.is_object()) throw FormatError(file, "", "is not a JSON object", kRemake);
  const Reader r(file, root);
  using T = json::value_t;

  const std::string schema = r.get(root, "schema", T::string, "a string").get<std::string>();
  if (schema != Layout::kSchema)
    throw UnsupportedError(file, "field 'schema'",
                           "is '" + schema + "'; this build reads '" + std::string(Layout::kSchema) + "'", kRemake);

  Layout layout;
  for (const json& v : r.get(root, "variants", T::array, "an array of variants")) {
    if (!v.is_object()) r.fail("variants", "must hold objects with name, path and sha256");
    LayoutVariant lv;
    lv.name = r.get(v, "name", T::string, "a string").get<std::string>();
    lv.path = r.get(v, "path", T::string, "a string").get<std::string>();
    lv.sha256 = r.get(v, "sha256", T::string, "a string").get<std::string>();
    if (layout.variant_index(lv.name) >= 0) r.fail("variants", "names '" + lv.name + "' twice");
    layout.variants.push_back(std::move(lv));
  }
  if (layout.variants.empty()) r.fail("variants", "is empty");
  const auto nvar = static_cast<std::int64_t>(layout.variants.size());

  if (!root.contains("budget_bytes")) r.fail("budget_bytes", "is missing (null when the capacity was given)");
  if (!root["budget_bytes"].is_null())
    layout.budget_bytes = r.get(root, "budget_bytes", T::number_unsigned, "a byte count or null").get<std::uint64_t>();
  if (root.contains("reserve") && root["reserve"].is_array())
    for (const json& item : root["reserve"]) {
      if (!item.is_object()) r.fail("reserve", "must hold objects with name, bytes and detail");
      layout.reserve.push_back({r.get(item, "name", T::string, "a string").get<std::string>(),
                                r.get(item, "bytes", T::number_unsigned, "a byte count").get<std::uint64_t>(),
                                item.value("detail", std::string())});
    }
  if (root.contains("reserve_spec")) {
    const json& spec = r.get(root, "reserve_spec", T::object, "an object: context_tokens, requests, prefill_chunk, miss_slots, kv_bytes");
    ReserveSpec rs;
    // The bounds of the CLI's and a session file's reserve settings.
    const JsonFields f = r.fields(spec, "reserve_spec.");
    rs.context_tokens = f.integer("context_tokens", 1, std::int64_t{1} << 24);
    rs.requests = f.integer("requests", 1, std::int64_t{1} << 20);
    rs.prefill_chunk = f.integer("prefill_chunk", 1, std::int64_t{1} << 20);
    rs.miss_slots = f.integer("miss_slots", -1, std::int64_t{1} << 20);
    rs.kv_bytes = f.integer("kv_bytes", 1, 8);
    layout.reserve_spec = rs;
  }

  ConsolidationPlan& p = layout.plan;
  p.variants = nvar;
  const json& capacity = r.get(root, "capacity", T::number_integer, "an integer");
  if (!json_int_in(capacity, 0, kMaxCells)) r.fail("capacity", "must be an integer from 0 to " + std::to_string(kMaxCells));
  p.capacity = capacity.get<std::int64_t>();
  const std::string policy = r.get(root, "policy", T::string, "a string").get<std::string>();
  const auto parsed = parse_policy(policy);
  if (!parsed) r.fail("policy", "is '" + policy + "'; expected round-robin, medoid, weighted, hybrid or virtual");
  p.policy = *parsed;
  if (root.contains("shares") && root["shares"].is_array())
    for (const json& s : root["shares"]) {
      if (!s.is_number()) r.fail("shares", "must hold numbers");
      p.shares.push_back(s.get<double>());
    }
  if (p.policy == Policy::Weighted && static_cast<std::int64_t>(p.shares.size()) != nvar)
    r.fail("shares", "must give one share per variant for the weighted policy");

  const json& map = r.get(root, "map", T::array, "an array of layers");
  p.layers = static_cast<std::int64_t>(map.size());
  if (p.layers == 0 || !map[0].is_array() || map[0].empty()) r.fail("map", "must be a non-empty array of layers");
  p.experts = static_cast<std::int64_t>(map[0].size());
  p.map = r.grid<int>("map", p.layers, p.experts, [&](const json& c, const std::string& where) {
    if (!json_int_in(c, -1, nvar - 1))
      r.fail(where, "must be -1 or a variant index below " + std::to_string(nvar));
    return c.get<int>();
  });
  p.rank = r.grid<std::int64_t>("rank", p.layers, p.experts, [&](const json& c, const std::string& where) {
    if (!json_int_in(c, -1, kMaxCells)) r.fail(where, "must be -1 or a rank from 0 to " + std::to_string(kMaxCells));
    return c.get<std::int64_t>();
  });
  p.distance = r.grid<double>("distance", p.layers, p.experts, [&](const json& c, const std::string& where) {
    if (c.is_null()) return std::nan("");
    if (!c.is_number() || c.get<double>() < 0) r.fail(where, "must be a distance ≥ 0 or null");
    return c.get<double>();
  });

  // A hybrid layout's deltas: how many delta folders' deltas are resident at each position, only
  // where a copy (the base's) is.
  if ((p.policy == Policy::Hybrid) != root.contains("deltas"))
    r.fail("deltas", p.policy == Policy::Hybrid ? "is missing: a hybrid layout says where deltas are resident" : "belongs to hybrid layouts only");
  if (p.policy == Policy::Hybrid) {
    p.deltas = r.grid<std::int64_t>("deltas", p.layers, p.experts, [&](const json& c, const std::string& where) {
      if (!json_int_in(c, 0, nvar - 1)) r.fail(where, "must be a count of delta folders from 0 to " + std::to_string(nvar - 1));
      return c.get<std::int64_t>();
    });
    for (std::size_t i = 0; i < p.deltas.size(); ++i)
      if (p.deltas[i] > 0 && p.map[i] < 0)
        r.fail("deltas", "puts deltas at layer " + std::to_string(static_cast<std::int64_t>(i) / p.experts) + ", expert " +
                             std::to_string(static_cast<std::int64_t>(i) % p.experts) + ", where no base copy is resident");
  }

  if ((p.policy == Policy::Virtual) != root.contains("virtual"))
    r.fail("virtual", p.policy == Policy::Virtual ? "is missing: a virtual layout gives per-layer counts and an initial set"
                                                   : "belongs to virtual layouts only");
  if (p.policy == Policy::Virtual) layout.virtual_experts = virtual_from_json(r, root["virtual"], p);

  std::int64_t residents = 0;
  for (int v : p.map) residents += v >= 0;
  if (residents > p.capacity)
    r.fail("map", "makes " + std::to_string(residents) + " experts resident, more than the capacity of " +
                      std::to_string(p.capacity));
  std::set<std::int64_t> ranks;
  for (std::int64_t rank : p.rank)
    if (rank >= 0 && !ranks.insert(rank).second) r.fail("rank", "gives rank " + std::to_string(rank) + " twice");
  return layout;
}

}  // namespace

Layout parse_layout(std::string_view text, const std::string& file) {
  json root;
  try {
    root = parse_json_bounded(text, file);
  } catch (const json::exception& e) {
    throw FormatError(file, "", std::string("is not valid JSON: ") + e.what(), kRemake);
  }
  try {
    return layout_from_json(root, file);
  } catch (const json::exception& e) {  // a field of another JSON type than the reader checked for
    throw FormatError(file, "", std::string("has a field of the wrong type: ") + e.what(), kRemake);
  }
}

std::vector<int> match_layout(const Layout& layout, const Family& family, const std::vector<std::string>& sha256,
                              const std::string& source) {
  const ModelSpec& s = family.spec();
  const ConsolidationPlan& p = layout.plan;
  if (p.layers != s.num_layers || p.experts != s.num_experts)
    throw MismatchError(source, "field 'map'",
                        "is " + std::to_string(p.layers) + " layers × " + std::to_string(p.experts) +
                            " experts, but the model has " + std::to_string(s.num_layers) + " × " +
                            std::to_string(s.num_experts),
                        "the layout was made for another model; re-run consolidate on these variants");
  std::vector<int> index;
  for (const LayoutVariant& v : layout.variants) {
    const Variant* found = family.find(v.name);
    if (!found)
      throw MismatchError(source, "variant '" + v.name + "'", "is not among the variants given",
                          "give the variants the layout was made for, under the same names");
    const auto i = static_cast<std::size_t>(found - family.variants().data());
    if (sha256.at(i) != v.sha256)
      throw MismatchError(source, "variant '" + v.name + "'",
                          "checkpoint " + found->checkpoint->dir().string() + " has changed since the layout was made (sha256 " +
                              sha256[i].substr(0, 12) + "… vs " + v.sha256.substr(0, 12) + "…)",
                          "re-run consolidate against the current checkpoints");
    index.push_back(static_cast<int>(i));
  }
  if (layout.variants.size() != family.size())
    for (const Variant& v : family.variants())
      if (layout.variant_index(v.name) < 0)
        throw MismatchError(source, "variant '" + v.name + "'", "is not in the layout",
                            "re-run consolidate including this variant");
  for (std::int64_t l = 0; l < p.layers; ++l)
    if (!s.is_sparse(l))
      for (std::int64_t e = 0; e < p.experts; ++e)
        if (p.resident(l, e) >= 0)
          throw MismatchError(source, "field 'map[" + std::to_string(l) + "][" + std::to_string(e) + "]'",
                              "makes an expert resident in dense layer " + std::to_string(l),
                              "use -1 for every expert of a dense layer");
  return index;
}

std::vector<PinnedExpert> pinned_from_layout(const Layout& layout, const std::vector<int>& to_store) {
  const ConsolidationPlan& plan = layout.plan;
  if (to_store.size() != layout.variants.size())
    throw MismatchError("layout", "variants", "the layout names " + std::to_string(layout.variants.size()) +
                                                  " variants but " + std::to_string(to_store.size()) + " were matched",
                        "match the layout to the family first");
  std::vector<PinnedExpert> out;
  for (std::int64_t l = 0; l < plan.layers; ++l)
    for (std::int64_t e = 0; e < plan.experts; ++e)
      if (const int v = plan.resident(l, e); v >= 0) out.push_back({l, e, to_store[static_cast<std::size_t>(v)]});
  return out;
}

}  // namespace mosaic
