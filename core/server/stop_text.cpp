#include "server/stop_text.h"

#include <algorithm>

namespace mosaic::server {

std::string StopText::push(std::string_view piece) {
  if (stopped_) return {};
  pending_ += piece;
  std::size_t cut = std::string::npos;  // where the earliest stop string starts
  for (const std::string& s : stops_)
    if (const auto at = pending_.find(s); at != std::string::npos) cut = std::min(cut, at);
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is the start of some stop string.
  std::size_t keep = 0;
  for (const std::string& s : stops_)
    for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > keep; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopText::finish() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace mosaic::server
