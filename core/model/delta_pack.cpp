#include "model/delta_pack.h"

#include <cstring>

#include "common/error.h"

namespace mosaic {

std::vector<TensorEntry> pack_entries(const std::string& name, std::int64_t rows, std::int64_t cols, const DeltaFormat& f) {
  std::vector<TensorEntry> e{{name + ".qweight", DType::I32, {rows, value_words(f, cols)}}};
  if (f.sparse24) e.push_back({name + ".meta", DType::I32, {rows, meta_words(f, cols)}});
  e.push_back({name + ".scales", DType::F16, {rows, group_count(f, cols)}});
  e.push_back({name + ".zeros", DType::U8, {rows, group_count(f, cols)}});
  return e;
}

std::vector<const TensorInfo*> find_pack(const SafetensorsFile& file, const std::string& name, std::int64_t rows, std::int64_t cols,
                                         const DeltaFormat& f) {
  std::vector<const TensorInfo*> out;
  for (const TensorEntry& want : pack_entries(name, rows, cols, f)) {
    const TensorInfo* t = file.find(want.name);
    if (!t) throw MissingError(file.path().string(), want.name, "is absent", "compress the delta again");
    if (t->dtype != want.dtype || t->shape != want.shape)
      throw FormatError(file.path().string(), want.name,
                        "is not the " + std::string(dtype_name(want.dtype)) + " array of the shape this format packs " + name + " into",
                        "compress the delta again");
    out.push_back(t);
  }
  return out;
}

PackedDelta read_pack(const SafetensorsFile& file, const std::string& name, std::int64_t rows, std::int64_t cols, const DeltaFormat& f) {
  PackedDelta p;
  p.rows = rows;
  p.cols = cols;
  for (const TensorInfo* t : find_pack(file, name, rows, cols, f)) {
    const auto bytes = file.data(*t);
    auto fill = [&](auto& v) {
      v.resize(bytes.size() / sizeof(v[0]));
      if (!bytes.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
    };
    if (t->name.ends_with(".qweight")) fill(p.qweight);
    else if (t->name.ends_with(".meta")) fill(p.meta);
    else if (t->name.ends_with(".scales")) fill(p.scales);
    else fill(p.zeros);
  }
  check_packed(p, f, file.path().string() + ": " + name);
  return p;
}

}  // namespace mosaic
