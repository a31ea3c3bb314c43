#include "cli/output_paths.h"

#include <algorithm>
#include <system_error>

#include "common/error.h"

namespace mosaic::cli {
namespace {

std::filesystem::path resolved(const std::filesystem::path& p) {
  std::error_code ec;
  const auto c = std::filesystem::weakly_canonical(std::filesystem::absolute(p), ec);  // through symlinks
  return ec ? std::filesystem::absolute(p).lexically_normal() : c;
}

bool within(const std::filesystem::path& inner, const std::filesystem::path& outer) {
  const auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}

}  // namespace

void refuse_output_over_inputs(const std::filesystem::path& out, const std::string& flag,
                               const std::vector<std::filesystem::path>& inputs) {
  if (out.empty()) return;
  const auto target = resolved(out);
  for (const auto& input : inputs) {
    if (input.empty()) continue;
    const auto in = resolved(input);
    if (target == in || (std::filesystem::is_directory(in) && within(target, in)))
      throw InvalidArgument(flag, out.string(),
                            target == in ? "is one of this command's inputs" : "lies inside the input folder " + input.string(),
                            "write the output somewhere else: it would overwrite what is read");
  }
}

}  // namespace mosaic::cli
