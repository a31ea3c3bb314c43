#include "analysis/delta_within.h"

#include <limits>
#include <map>
#include <tuple>

#include "analysis/checkpoint_folder.h"
#include "analysis/cross_distance.h"
#include "common/error.h"

namespace fs = std::filesystem;

namespace mosaic {

std::vector<std::int64_t> layer_medoids(const Checkpoint& variant) {
  const ModelSpec& s = variant.spec();
  std::vector<std::int64_t> medoids(static_cast<std::size_t>(s.num_layers), -1);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    if (!s.is_sparse(l)) continue;
    const CrossDistances d = cross_position_distances(variant, variant, l).value();
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t a = 0; a < d.size(); ++a) {
      double sum = 0;
      for (std::size_t b = 0; b < d.size(); ++b) sum += d.at(a, b);
      if (sum < best) {  // ties: the lowest index
        best = sum;
        medoids[static_cast<std::size_t>(l)] = d.positions[a].second;
      }
    }
  }
  return medoids;
}

WithinReport write_delta_within(const Checkpoint& variant, const DeltaFormat& format, const fs::path& out, const ExpertHessians* calibration) {
  if (variant.is_delta() || variant.is_adapter())
    throw InvalidArgument(variant.dir().string(), "", "is a delta folder or an adapter, not a full checkpoint",
                          "give the full checkpoint (delta expand writes one from a delta folder)");
  if (fs::exists(out) && (!fs::is_directory(out) || !fs::is_empty(out)))
    throw InvalidArgument(out.string(), "", "exists and is not an empty folder", "give a new folder");
  WithinReport r;
  r.medoids = layer_medoids(variant);
  const std::string name = variant.dir().filename().empty() ? variant.dir().parent_path().filename().string() : variant.dir().filename().string();
  // Written beside OUT and renamed into place: a failure leaves nothing.
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".within-tmp");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    std::map<std::tuple<std::int64_t, std::int64_t, ExpertRole>, const Weight*> experts;
    std::vector<TensorEntry> entries;
    for (const Weight& w : variant.weights()) {
      entries.push_back({w.expected.name, w.dtype, w.expected.shape});
      if (w.expected.is_expert()) experts[{w.expected.layer, w.expected.expert, w.expected.role}] = &w;
    }
    write_checkpoint_folder(tmp / "medoid-base", variant.dir(), entries, [&](std::size_t i) {
      const Weight& w = variant.weights()[i];
      const ExpectedTensor& x = w.expected;
      if (!x.is_expert()) return w.data();
      return experts.at({x.layer, r.medoids[static_cast<std::size_t>(x.layer)], x.role})->data();
    });
    r.delta = write_delta(Checkpoint(tmp / "medoid-base"), variant, format, tmp / (name + "-within"), calibration);
    if (fs::exists(out)) fs::remove(out);  // empty, checked above
    fs::rename(tmp, out);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  r.base_dir = out / "medoid-base";
  r.delta_dir = out / (name + "-within");
  return r;
}

}  // namespace mosaic
