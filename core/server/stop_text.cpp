#include "server/stop_text.h"

#include <algorithm>

namespace mosaic::server {

StopText::StopText(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (s.empty()) continue;  // the parser refuses empty stops; one here would match nothing
    Matcher m{std::move(s), {}, 0};
    m.border.assign(m.text.size(), 0);
    for (std::size_t i = 1, k = 0; i < m.text.size(); ++i) {
      while (k > 0 && m.text[i] != m.text[k]) k = m.border[k - 1];
      if (m.text[i] == m.text[k]) ++k;
      m.border[i] = k;
    }
    stops_.push_back(std::move(m));
  }
}

std::string StopText::push(std::string_view piece) {
  if (stopped_) return {};
  const std::size_t before = pending_.size();
  pending_ += piece;
  std::size_t held = 0;  // the longest tail that may still become a stop string
  for (std::size_t i = before; i < pending_.size(); ++i) {
    const char c = pending_[i];
    std::size_t complete = 0;  // length of the longest stop string this character completes
    held = 0;
    for (Matcher& m : stops_) {
      while (m.matched > 0 && m.text[m.matched] != c) m.matched = m.border[m.matched - 1];  // never full: a full match stops
      if (m.text[m.matched] == c) ++m.matched;
      if (m.matched == m.text.size()) complete = std::max(complete, m.matched);
      held = std::max(held, m.matched);
    }
    if (complete > 0) {
      stopped_ = true;
      std::string out = pending_.substr(0, i + 1 - complete);
      pending_.clear();
      return out;
    }
  }
  if (pending_.size() == before) return {};  // an empty piece: hold what was held
  std::string out = pending_.substr(0, pending_.size() - held);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StopText::finish() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace mosaic::server
