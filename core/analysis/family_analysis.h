#pragma once
// A family's expert distances with their provenance: the checkpoints' content hashes, and an
// on-disk cache keyed by them so that reopening an unchanged family does not recompute.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "analysis/expert_distance.h"

namespace mosaic {

struct AnalysisOptions {
  std::optional<std::filesystem::path> cache_dir;  // nullopt: no cache (hash memo nor distances)
  int threads = 0;                                 // <= 0: one per core
  AnalysisProgress progress;
};

struct FamilyAnalysis {
  std::vector<std::string> sha256;  // checkpoint_sha256 of each variant, in family order
  ExpertDistances distances;
  bool from_cache = false;
  // What went wrong with the cache without stopping the analysis (a folder that cannot be written):
  // the results stand, they are only not kept for next time.
  std::vector<std::string> warnings;
};

// $MOSAIC_CACHE_DIR, else $XDG_CACHE_HOME/mosaic, else ~/.cache/mosaic.
std::filesystem::path default_cache_dir();

// The content hashes of every variant (through the cache's hash memo when there is a cache). A memo
// that cannot be saved is said in `warnings` (when given), not thrown.
std::vector<std::string> family_sha256(const Family& family, const std::optional<std::filesystem::path>& cache_dir,
                                       std::vector<std::string>* warnings = nullptr);

// Distances from the cache when an entry for exactly these checkpoints (in this order) exists and
// reads back whole; otherwise computed and stored. A damaged entry is recomputed, never trusted.
// Cancelled when `progress` says so; failed with what expert_distances fails with. A cache that
// cannot be written is a warning in the result, not a failure.
Outcome<FamilyAnalysis> analyze_family(const Family& family, const AnalysisOptions& options = {});

}  // namespace mosaic
