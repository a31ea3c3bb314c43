#pragma once
#include <filesystem>
#include <functional>
#include <ostream>

namespace mosaic {

// Writes `path` all or nothing: the body goes to a temporary file beside it, which is renamed over
// `path` only when `write` returned and the stream is good. On any failure the temporary is removed
// and the old file (if any) is untouched. Throws IoError.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

}  // namespace mosaic
