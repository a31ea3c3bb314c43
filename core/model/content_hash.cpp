#include "model/content_hash.h"

#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_text.h"
#include "common/sha256.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

// Without a memo, a process still hashes each file once: it opens a base under every delta folder
// of a family, and every family it builds. A file written in the last two seconds is hashed every
// time, since a rewrite within one timestamp tick keeps size and time (git's "racy" files).
std::string sha256_once_per_process(const fs::path& file) {
  struct Entry {
    std::uintmax_t size;
    fs::file_time_type mtime;
    std::string sha256;
  };
  static std::mutex mutex;
  static std::map<std::string, Entry> entries;
  std::error_code ec;
  const std::string key = fs::absolute(file, ec).lexically_normal().string();
  const auto size = fs::file_size(file, ec);
  const auto mtime = ec ? fs::file_time_type{} : fs::last_write_time(file, ec);
  if (ec) return sha256_file(file);  // its error names the file
  {
    std::lock_guard lock(mutex);
    if (const auto it = entries.find(key); it != entries.end() && it->second.size == size && it->second.mtime == mtime) return it->second.sha256;
  }
  std::string h = sha256_file(file);
  if (fs::file_time_type::clock::now() - mtime > std::chrono::seconds(2)) {
    std::lock_guard lock(mutex);
    entries[key] = {size, mtime, h};
  }
  return h;
}

}  // namespace

FileHashMemo::FileHashMemo(fs::path store) : store_(std::move(store)) {
  std::ifstream in(store_, std::ios::binary);
  if (!in) return;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = parse_json_bounded(ss.str(), store_.string());
  } catch (const std::exception&) {
    return;  // a damaged memo is an empty one: the files are hashed again
  }
  if (!j.is_object()) return;
  for (const auto& [path, e] : j.items()) {
    if (!e.is_object() || !e.contains("size") || !e.contains("mtime_ns") || !e.contains("sha256")) continue;
    if (!e["size"].is_number_unsigned() || !e["mtime_ns"].is_number_integer() || !e["sha256"].is_string()) continue;
    entries_[path] = {e["size"].get<std::uintmax_t>(), e["mtime_ns"].get<long long>(), e["sha256"].get<std::string>()};
  }
}

std::string FileHashMemo::hash(const fs::path& file) {
  std::error_code ec;
  const fs::path abs = fs::absolute(file, ec).lexically_normal();
  const auto size = fs::file_size(abs, ec);
  if (ec) throw IoError(file.string(), "", "cannot be read: " + ec.message());
  const long long mtime = fs::last_write_time(abs, ec).time_since_epoch().count();
  if (ec) throw IoError(file.string(), "", "cannot be read: " + ec.message());
  const auto it = entries_.find(abs.string());
  if (it != entries_.end() && it->second.size == size && it->second.mtime_ns == mtime) return it->second.sha256;
  std::string h = sha256_file(abs);
  ++computed_;
  entries_[abs.string()] = {size, mtime, h};
  return h;
}

void FileHashMemo::save() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [path, e] : entries_) j[path] = {{"size", e.size}, {"mtime_ns", e.mtime_ns}, {"sha256", e.sha256}};
  std::error_code ec;
  fs::create_directories(store_.parent_path(), ec);
  write_file_atomically(store_, [&](std::ostream& out) { out << j.dump(1) << "\n"; });
}

std::string checkpoint_sha256(const Checkpoint& checkpoint, FileHashMemo* memo) {
  std::set<fs::path> files{checkpoint.dir() / "config.json"};
  for (const auto& f : checkpoint.files()) files.insert(f->path());
  if (fs::exists(checkpoint.dir() / "model.safetensors.index.json"))
    files.insert(checkpoint.dir() / "model.safetensors.index.json");
  for (const char* own : {"expert_cfg.json", "delta.json"})  // what an adapter or a delta folder adds
    if (fs::exists(checkpoint.dir() / own)) files.insert(checkpoint.dir() / own);
  Sha256 listing;
  for (const fs::path& f : files) {
    const std::string h = memo ? memo->hash(f) : sha256_once_per_process(f);
    listing.update(h + "  " + f.filename().string() + "\n");
  }
  return listing.hex();
}

}  // namespace mosaic
