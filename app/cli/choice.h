#pragma once
// An option that takes one of a few names (--policy, --hit, --miss, --device, …): a value that is
// none of them is refused naming the nearest, as misspelt commands and options are.
#include <string>
#include <string_view>
#include <vector>

namespace mosaic::cli {

// Throws InvalidArgument: `flag` 'given' "is not <what>" (did you mean …?), "use a, b or c".
[[noreturn]] void refuse_choice(const std::string& flag, const std::string& given, const std::string& what,
                                const std::vector<std::string_view>& choices);

}  // namespace mosaic::cli
