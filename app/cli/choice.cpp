#include "cli/choice.h"

#include "common/edit_distance.h"
#include "common/error.h"

namespace mosaic::cli {

void refuse_choice(const std::string& flag, const std::string& given, const std::string& what, const std::vector<std::string_view>& choices) {
  std::string use = "use ";
  for (std::size_t i = 0; i < choices.size(); ++i) use.append(i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ").append(choices[i]);
  const std::string_view near = nearest_name(given, choices);
  throw InvalidArgument(flag, "'" + given + "'", "is not " + what + (near.empty() ? std::string() : " (did you mean '" + std::string(near) + "'?)"), use);
}

}  // namespace mosaic::cli
