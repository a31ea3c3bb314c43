#include "analysis/delta_folder.h"

#include <cstring>

#include "analysis/checkpoint_folder.h"
#include "analysis/delta_gptq.h"
#include "common/error.h"
#include "model/content_hash.h"
#include "model/delta_config.h"
#include "model/delta_pack.h"
#include "model/dtype_convert.h"
#include "model/mapped_file.h"
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

std::span<const std::byte> part_bytes(const PackedDelta& p, const std::string& entry) {
  if (entry.ends_with(".qweight")) return bytes_of(p.qweight);
  if (entry.ends_with(".meta")) return bytes_of(p.meta);
  if (entry.ends_with(".scales")) return bytes_of(p.scales);
  return bytes_of(p.zeros);
}

}  // namespace

DeltaReport write_delta(const Checkpoint& base, const Checkpoint& variant, const DeltaFormat& format, const fs::path& out,
                        const ExpertHessians* calibration) {
  if (base.spec().model_type() != variant.spec().model_type())
    throw MismatchError(variant.dir().string(), "model_type",
                        "is '" + std::string(variant.spec().model_type()) + "', the base " + base.dir().string() + " is '" + std::string(base.spec().model_type()) + "'",
                        "a delta is taken from the checkpoint the variant was fine-tuned from");
  if (base.is_delta())
    throw UnsupportedError(base.dir().string(), "delta.json", "makes the base a delta folder; a delta is taken from a dense checkpoint",
                           "give the checkpoint the variant was fine-tuned from (or `mosaic-cli delta expand` this one)");
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
          const WeightFloats variant_floats(variant, w);  // a delta folder's expert: its own base + Δ̂
          std::vector<float> v(variant_floats.size());
          variant_floats.read(0, v);
          const Weight& b = base.weight(w.expected.name);
          const auto bw = as_floats(b.dtype, b.data());
          std::vector<float> delta(v.size());
          for (std::size_t k = 0; k < v.size(); ++k) delta[k] = v[k] - bw[k];
          variant_floats.release();  // each matrix is read once: its pages go back (a family larger than RAM)
          release_pages(b.data());
          const std::span<const double> hessian =
              calibration ? calibration->of(w.expected.layer, w.expected.expert, w.expected.role) : std::span<const double>();
          const std::int64_t rows = w.expected.shape[0], cols = w.expected.shape[1];
          pack = hessian.empty() ? compress_delta(delta, rows, cols, format) : compress_delta_gptq(delta, rows, cols, format, hessian);
          expanded.resize(delta.size());
          expand_delta(pack, format, expanded);
          if (report.layers.empty() || report.layers.back().layer != w.expected.layer) report.layers.push_back({.layer = w.expected.layer});
          DeltaLayerReport& l = report.layers.back();
          ++l.matrices;
          if (!hessian.empty()) {
            ++l.calibrated;
            std::vector<float> e(delta.size());
            for (std::size_t k = 0; k < e.size(); ++k) e[k] = delta[k] - expanded[k];
            l.output_error_sq += output_error_sq(e, rows, cols, hessian);
            l.output_sq += output_error_sq(v, rows, cols, hessian);
            expand_delta(compress_delta(delta, rows, cols, format), format, e);
            for (std::size_t k = 0; k < e.size(); ++k) e[k] = delta[k] - e[k];
            l.rounded_output_error_sq += output_error_sq(e, rows, cols, hessian);
          }
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
  if (!fs::exists(delta_dir / kDeltaCfgFile))
    throw InvalidArgument(delta_dir.string(), kDeltaCfgFile, "is absent: this is not a delta folder",
                          "give a folder written by `mosaic-cli delta compress`");
  const Checkpoint delta(delta_dir);  // checks the base, its hash and every pack's arrays
  std::vector<TensorEntry> entries;
  for (const Weight& w : delta.weights())
    entries.push_back({w.expected.name, w.expected.is_expert() ? DType::F32 : w.dtype, w.expected.shape});
  std::vector<float> dense;
  write_checkpoint_folder(out, delta_dir, entries, [&](std::size_t i) -> std::span<const std::byte> {
    const Weight& w = delta.weights()[i];
    if (!w.expected.is_expert()) return w.data();
    const WeightFloats floats(delta, w);  // base + Δ̂
    dense.resize(floats.size());
    floats.read(0, dense);
    return bytes_of(dense);
  });
}

}  // namespace mosaic
