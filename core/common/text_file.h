#pragma once
#include <filesystem>
#include <string>

namespace mosaic {

// The whole file as bytes. Throws IoError naming the file (with `hint`, if any) when it cannot be read.
std::string read_text_file(const std::filesystem::path& path, const std::string& hint = {});

}  // namespace mosaic
