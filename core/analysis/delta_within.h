#pragma once
// DeltaMoE's own setting: deltas within one MoE model. Each MoE layer's experts are written as one
// base expert of that layer plus compressed deltas of the others. Mosaic chooses the layer's medoid
// (the expert with the least summed L2 distance to the layer's others, gate, up and down together):
// DeltaMoE picks its base by similarity too, and the medoid is the choice that minimises the sum of
// the deltas' norms, which is what the codec's error grows with.
//
// It is written as a family folder of two checkpoints, so that everything that serves delta folders
// serves it unchanged:
//   OUT/medoid-base/  the variant's non-expert tensors, and at every expert of a layer its medoid
//                     (the host store keeps each distinct tensor once: one expert a layer in RAM);
//   OUT/<variant>-within/  a delta folder over ../medoid-base (docs/delta-format.md).
// The base folder's file holds the medoid at every position of its layer, so on disk it is as large
// as the variant; what is served is not.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "analysis/delta_folder.h"

namespace mosaic {

// Per layer, the index of its medoid expert (-1 for dense layers).
std::vector<std::int64_t> layer_medoids(const Checkpoint& variant);

struct WithinReport {
  std::vector<std::int64_t> medoids;  // per layer (-1: dense)
  DeltaReport delta;
  std::filesystem::path base_dir, delta_dir;
};

// Writes OUT as above; OUT must not exist or be an empty folder (InvalidArgument). All or nothing.
// `calibration` as write_delta takes it (the variant's own expert inputs).
WithinReport write_delta_within(const Checkpoint& variant, const DeltaFormat& format, const std::filesystem::path& out,
                                const ExpertHessians* calibration = nullptr);

}  // namespace mosaic
