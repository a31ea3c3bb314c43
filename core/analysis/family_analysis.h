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
};

// $MOSAIC_CACHE_DIR, else $XDG_CACHE_HOME/mosaic, else ~/.cache/mosaic.
std::filesystem::path default_cache_dir();

// The content hashes of every variant (through the cache's hash memo when there is a cache).
std::vector<std::string> family_sha256(const Family& family, const std::optional<std::filesystem::path>& cache_dir);

// Distances from the cache when an entry for exactly these checkpoints (in this order) exists and
// reads back whole; otherwise computed and stored. A damaged entry is recomputed, never trusted.
// Cancelled when `progress` says so; failed with what expert_distances fails with, or IoError when
// the cache cannot be written.
Outcome<FamilyAnalysis> analyze_family(const Family& family, const AnalysisOptions& options = {});

}  // namespace mosaic
