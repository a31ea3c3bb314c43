#include "analysis/delta_folder.h"

#include <cstring>

#include "analysis/checkpoint_folder.h"
#include "common/error.h"
#include "model/content_hash.h"
#include "model/delta_config.h"
#include "model/dtype_convert.h"
#include "model/model_spec.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

std::vector<float> as_floats(DType dtype, std::span<const std::byte> bytes) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  to_float(dtype, bytes.data(), out);
  return out;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// The header entries of one matrix's pack: qweight, meta (2:4 only), scales, zeros.
std::vector<TensorEntry> pack_entries(const std::string& name, std::int64_t rows, std::int64_t cols, const DeltaFormat& f) {
  std::vector<TensorEntry> e{{name + ".qweight", DType::I32, {rows, value_words(f, cols)}}};
  if (f.sparse24) e.push_back({name + ".meta", DType::I32, {rows, meta_words(f, cols)}});
  e.push_back({name + ".scales", DType::F16, {rows, group_count(f, cols)}});
  e.push_back({name + ".zeros", DType::U8, {rows, group_count(f, cols)}});
  return e;
}

std::span<const std::byte> part_bytes(const PackedDelta& p, const std::string& entry) {
  if (entry.ends_with(".qweight")) return bytes_of(p.qweight);
  if (entry.ends_with(".meta")) return bytes_of(p.meta);
  if (entry.ends_with(".scales")) return bytes_of(p.scales);
  return bytes_of(p.zeros);
}

// One matrix's pack as stored in `file`, each array's dtype and shape checked against the format.
PackedDelta read_pack(const SafetensorsFile& file, const std::string& name, std::int64_t rows, std::int64_t cols, const DeltaFormat& f) {
  PackedDelta p;
  p.rows = rows;
  p.cols = cols;
  for (const TensorEntry& want : pack_entries(name, rows, cols, f)) {
    const TensorInfo* t = file.find(want.name);
    if (!t) throw MissingError(file.path().string(), want.name, "is absent", "compress the delta again");
    if (t->dtype != want.dtype || t->shape != want.shape)
      throw FormatError(file.path().string(), want.name, "is not the " + std::string(dtype_name(want.dtype)) + " array of the shape this format packs " + name + " into",
                        "compress the delta again");
    const auto bytes = file.data(*t);
    auto fill = [&](auto& v) {
      v.resize(bytes.size() / sizeof(v[0]));
      std::memcpy(v.data(), bytes.data(), bytes.size());
    };
    if (want.name.ends_with(".qweight")) fill(p.qweight);
    else if (want.name.ends_with(".meta")) fill(p.meta);
    else if (want.name.ends_with(".scales")) fill(p.scales);
    else fill(p.zeros);
  }
  check_packed(p, f, file.path().string() + ": " + name);
  return p;
}

}  // namespace

DeltaReport write_delta(const Checkpoint& base, const Checkpoint& variant, const DeltaFormat& format, const fs::path& out) {
  if (base.spec().model_type() != variant.spec().model_type())
    throw MismatchError(variant.dir().string(), "model_type",
                        "is '" + std::string(variant.spec().model_type()) + "', the base " + base.dir().string() + " is '" + std::string(base.spec().model_type()) + "'",
                        "a delta is taken from the checkpoint the variant was fine-tuned from");
  // Every weight of the variant has its like in the base; experts are matrices the format can pack.
  for (const Weight& w : variant.weights()) {
    const Weight& b = base.weight(w.expected.name);
    if (b.expected.shape != w.expected.shape)
      throw MismatchError(variant.dir().string(), w.expected.name, "has another shape than in the base " + base.dir().string(),
                          "a delta is taken from the checkpoint the variant was fine-tuned from");
    if (w.expected.is_expert()) {
      require_finite(w);  // a NaN has no code: refused naming the tensor, not packed as garbage
      require_finite(b);
      if (w.expected.shape.size() != 2)
        throw UnsupportedError(variant.dir().string(), w.expected.name, "is not a matrix", "deltas are taken of 2-D expert weights");
      check_format(format, w.expected.shape[0], w.expected.shape[1], w.expected.name);
    }
  }
  DeltaReport report;
  report.variant_bytes = variant.total_bytes();
  std::vector<TensorEntry> entries;
  std::vector<std::size_t> weight_of;  // entry → the variant weight it comes from
  for (std::size_t i = 0; i < variant.weights().size(); ++i) {
    const Weight& w = variant.weights()[i];
    const auto more = w.expected.is_expert() ? pack_entries(w.expected.name, w.expected.shape[0], w.expected.shape[1], format)
                                             : std::vector<TensorEntry>{{w.expected.name, w.dtype, w.expected.shape}};
    for (const TensorEntry& e : more) {
      entries.push_back(e);
      weight_of.push_back(i);
      report.folder_bytes += e.nbytes();
    }
  }
  PackedDelta pack;  // the matrix being written, from its qweight entry to its zeros
  std::vector<float> expanded;
  DeltaConfig config{.base_model = fs::absolute(base.dir()).lexically_normal().lexically_relative(fs::absolute(out).lexically_normal()),
                     .base_sha256 = checkpoint_sha256(base),
                     .format = format};
  write_checkpoint_folder(
      out, variant.dir(), entries,
      [&](std::size_t i) -> std::span<const std::byte> {
        const Weight& w = variant.weights()[weight_of[i]];
        if (!w.expected.is_expert()) return w.data();
        if (entries[i].name.ends_with(".qweight")) {
          const auto v = as_floats(w.dtype, w.data());
          const Weight& b = base.weight(w.expected.name);
          const auto bw = as_floats(b.dtype, b.data());
          std::vector<float> delta(v.size());
          for (std::size_t k = 0; k < v.size(); ++k) delta[k] = v[k] - bw[k];
          pack = compress_delta(delta, w.expected.shape[0], w.expected.shape[1], format);
          expanded.resize(delta.size());
          expand_delta(pack, format, expanded);
          if (report.layers.empty() || report.layers.back().layer != w.expected.layer) report.layers.push_back({.layer = w.expected.layer});
          DeltaLayerReport& l = report.layers.back();
          l.dense_bytes += w.bytes();
          l.packed_bytes += packed_bytes(format, pack.rows, pack.cols);
          for (std::size_t k = 0; k < v.size(); ++k) {
            l.weight_sq += static_cast<double>(v[k]) * v[k];
            l.delta_sq += static_cast<double>(delta[k]) * delta[k];
            l.error_sq += static_cast<double>(delta[k] - expanded[k]) * (delta[k] - expanded[k]);
          }
        }
        return part_bytes(pack, entries[i].name);
      },
      {{"format", "pt"}, {"mosaic", kDeltaSchema}}, {{kDeltaCfgFile, to_delta_json(config)}});
  return report;
}

void write_expanded(const fs::path& delta_dir, const fs::path& out) {
  const DeltaConfig config = read_delta_config(delta_dir / kDeltaCfgFile);
  const fs::path base_dir = config.base_model.is_absolute() ? config.base_model : (delta_dir / config.base_model).lexically_normal();
  const Checkpoint base(base_dir);
  if (checkpoint_sha256(base) != config.base_sha256)
    throw MismatchError((delta_dir / kDeltaCfgFile).string(), "base_sha256",
                        "names another base than the checkpoint now at " + base_dir.string() + " (its files have changed)",
                        "put back the base the delta was taken from, or compress the variant again from this base");
  const ModelSpec spec = load_model_spec(delta_dir / "config.json");
  const SafetensorsFile file(delta_dir / "model.safetensors");
  std::vector<ExpectedTensor> expected = expected_tensors(spec);
  std::vector<TensorEntry> entries;
  for (const ExpectedTensor& t : expected) {
    if (t.is_expert()) {
      if (base.weight(t.name).expected.shape != t.shape)
        throw MismatchError(delta_dir.string(), t.name, "has another shape than in the base " + base_dir.string());
      entries.push_back({t.name, DType::F32, t.shape});
      continue;
    }
    const TensorInfo* info = file.find(t.name);
    if (!info) throw MissingError(file.path().string(), t.name, "is absent", "compress the delta again");
    if (info->shape != t.shape || !is_floating(info->dtype))
      throw FormatError(file.path().string(), t.name, "is not a floating-point tensor of the shape config.json gives", "compress the delta again");
    entries.push_back({t.name, info->dtype, t.shape});
  }
  std::vector<float> dense;
  write_checkpoint_folder(out, delta_dir, entries, [&](std::size_t i) -> std::span<const std::byte> {
    const ExpectedTensor& t = expected[i];
    if (!t.is_expert()) return file.data(*file.find(t.name));
    const PackedDelta pack = read_pack(file, t.name, t.shape[0], t.shape[1], config.format);
    dense.resize(static_cast<std::size_t>(t.shape[0] * t.shape[1]));
    expand_delta(pack, config.format, dense);
    const Weight& b = base.weight(t.name);
    const auto bw = as_floats(b.dtype, b.data());
    for (std::size_t k = 0; k < dense.size(); ++k) dense[k] += bw[k];
    return bytes_of(dense);
  });
}

}  // namespace mosaic
