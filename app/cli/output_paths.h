#pragma once
// Outputs are checked before any work, the same way by every command:
// - they never land on inputs: an output that is one of a command's inputs (by any name: symlink or
//   hard link), or lies inside an input checkpoint folder or an adapter's base folder, is refused. A
//   family folder's own files (a layout beside the variants) are not inputs;
// - they go into a folder that exists: an output folder itself (merge, report) is created, its
//   parent is not, so a mistyped path leaves no folders behind;
// - they replace only what an output may replace: a file output that names a folder, a socket or a
//   block device is refused (a FIFO or character device is streamed to), a folder output that names
//   a file is refused, and a database must be a regular file (SQLite writes it in place).
#include <filesystem>
#include <string>
#include <vector>

namespace mosaic::cli {

enum class OutputKind { File, Folder, Database };

// Throws InvalidArgument naming `flag` and the input it would overwrite, the missing folder, or what
// the path names that this kind of output may not replace. Empty paths are ignored.
void check_output(const std::filesystem::path& out, const std::string& flag,
                  const std::vector<std::filesystem::path>& inputs, OutputKind kind = OutputKind::File);

}  // namespace mosaic::cli
