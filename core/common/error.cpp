#include "common/error.h"

namespace mosaic {
namespace {
std::string compose(const std::string& subject, const std::string& item, const std::string& problem,
                    const std::string& hint) {
  std::string m = subject;
  if (!item.empty()) m += (m.empty() ? "" : ": ") + item;
  m += (m.empty() ? "" : ": ") + problem;
  if (!hint.empty()) m += " (" + hint + ")";
  return m;
}
}  // namespace

Error::Error(std::string subject, std::string item, std::string problem, std::string hint)
    : std::runtime_error(compose(subject, item, problem, hint)),
      subject_(std::move(subject)),
      item_(std::move(item)),
      problem_(std::move(problem)),
      hint_(std::move(hint)) {}

}  // namespace mosaic
