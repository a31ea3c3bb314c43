#include "analysis/family_analysis.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_text.h"
#include "common/sha256.h"
#include "model/content_hash.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

using json = nlohmann::json;
constexpr const char* kSchema = "mosaic.distances/1";

json cells(const std::vector<double>& v) {
  json a = json::array();
  for (double d : v) a.push_back(std::isnan(d) ? json(nullptr) : json(d));
  return a;
}

bool read_cells(const json& a, std::size_t expected, std::vector<double>& out) {
  if (!a.is_array() || a.size() != expected) return false;
  out.clear();
  for (const json& c : a) {
    if (c.is_null()) out.push_back(std::nan(""));
    else if (c.is_number()) out.push_back(c.get<double>());
    else return false;
  }
  return true;
}

// A cache entry, or nullopt when it is absent, for other checkpoints, or not what Mosaic writes
// (a damaged or hand-edited cache is a miss, recomputed, never an error).
std::optional<ExpertDistances> read_entry(const fs::path& file, const std::vector<std::string>& sha256) try {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = parse_json_bounded(ss.str(), file.string());
  if (!j.is_object() || j.value("schema", "") != kSchema || j.value("sha256", json()) != json(sha256)) return std::nullopt;
  ExpertDistances d;
  d.layers = j.value("layers", std::int64_t{0});
  d.experts = j.value("experts", std::int64_t{0});
  d.variants = static_cast<std::int64_t>(sha256.size());
  if (d.layers <= 0 || d.experts <= 0) return std::nullopt;
  const auto n = static_cast<std::size_t>(d.layers * d.experts);
  if (!read_cells(j["position"], n, d.position) ||
      !read_cells(j["pairs"], n * static_cast<std::size_t>(d.pair_count()), d.pairs))
    return std::nullopt;
  return d;
} catch (const std::exception&) {
  return std::nullopt;
}

}  // namespace

fs::path default_cache_dir() {
  if (const char* d = std::getenv("MOSAIC_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "mosaic";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "mosaic";
  return fs::temp_directory_path() / "mosaic-cache";
}

std::vector<std::string> family_sha256(const Family& family, const std::optional<fs::path>& cache_dir, std::vector<std::string>* warnings) {
  std::optional<FileHashMemo> memo;
  if (cache_dir) memo.emplace(*cache_dir / "file-hashes.json");
  std::vector<std::string> out;
  for (const Variant& v : family.variants()) out.push_back(checkpoint_sha256(*v.checkpoint, memo ? &*memo : nullptr));
  if (memo && memo->computed() > 0) try {
      memo->save();
    } catch (const Error& e) {
      if (warnings) warnings->push_back(std::string("the cache's file hashes were not kept: ") + e.what());
    }
  return out;
}

Outcome<FamilyAnalysis> analyze_family(const Family& family, const AnalysisOptions& options) {
  return Outcome<FamilyAnalysis>::of([&]() -> Outcome<FamilyAnalysis> {
    FamilyAnalysis result;
    result.sha256 = family_sha256(family, options.cache_dir, &result.warnings);
    std::optional<fs::path> entry;
    if (options.cache_dir) {
      std::string key_text = kSchema;
      for (const std::string& h : result.sha256) key_text += "\n" + h;
      entry = *options.cache_dir / "distances" / (sha256_hex(key_text) + ".json");
      if (auto cached = read_entry(*entry, result.sha256)) {
        result.distances = std::move(*cached);
        result.from_cache = true;
        return result;
      }
    }
    auto d = expert_distances(family, options.progress, options.threads);
    if (d.is_cancelled()) return Cancelled{};
    result.distances = std::move(*d);
    if (entry) {
      const ExpertDistances& x = result.distances;
      const json j = {{"schema", kSchema},       {"sha256", result.sha256}, {"layers", x.layers},
                      {"experts", x.experts},    {"position", cells(x.position)}, {"pairs", cells(x.pairs)}};
      std::error_code ec;
      fs::create_directories(entry->parent_path(), ec);
      try {
        if (ec) throw IoError(entry->parent_path().string(), "", "cannot create the cache folder: " + ec.message());
        write_file_atomically(*entry, [&](std::ostream& out) { out << j.dump() << "\n"; });
      } catch (const Error& e) {
        result.warnings.push_back(std::string("the distances were computed but not cached: ") + e.what() +
                                  " (set MOSAIC_CACHE_DIR or --cache-dir to a writable folder to keep them)");
      }
    }
    return result;
  });
}

}  // namespace mosaic
