#include "common/pending_outputs.h"

#include <mutex>
#include <string>
#include <unordered_map>

namespace mosaic {
namespace {

std::mutex pending_mutex;
std::unordered_map<std::string, int>& pending_paths() {  // path → how many holders (the same path may be staged twice)
  static std::unordered_map<std::string, int> p;
  return p;
}

}  // namespace

PendingOutput::PendingOutput(std::filesystem::path path) : path_(std::move(path)) {
  const std::lock_guard lock(pending_mutex);
  ++pending_paths()[path_.string()];
}

PendingOutput::~PendingOutput() {
  const std::lock_guard lock(pending_mutex);
  if (const auto it = pending_paths().find(path_.string()); it != pending_paths().end() && --it->second == 0) pending_paths().erase(it);
}

std::size_t discard_pending_outputs() {
  const std::lock_guard lock(pending_mutex);  // held to the end: no holder registers or lets go meanwhile
  std::size_t removed = 0;
  for (const auto& [path, holders] : pending_paths()) {
    std::error_code ec;
    if (std::filesystem::remove_all(path, ec) > 0 && !ec) ++removed;
  }
  pending_paths().clear();
  return removed;
}

}  // namespace mosaic
