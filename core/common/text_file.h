#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace mosaic {

// Refuses, as an IoError naming the path, what no reader should open: a FIFO or device (its reader
// would block or never end), a folder, a symbolic-link loop. A path that does not exist passes: the
// caller's own open says so in its own words.
void require_regular_file(const std::filesystem::path& path, const std::string& hint = {});

// Whether a file is there, refusing what require_regular_file refuses (a folder or a link loop where
// the file should be is a typed error naming it, not a filesystem exception or a quiet "absent").
bool file_present(const std::filesystem::path& path, const std::string& hint = {});

// The whole file as bytes. Throws IoError naming the file (with `hint`, if any) when it cannot be
// read, is not a regular file, or is larger than `max_bytes` (text configs are small; a huge one is
// a mistake, not something to load into memory).
std::string read_text_file(const std::filesystem::path& path, const std::string& hint = {}, std::uintmax_t max_bytes = 256u << 20);

}  // namespace mosaic
