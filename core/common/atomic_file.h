#pragma once
// How Mosaic writes an output: a regular file all or nothing (a temporary beside it, renamed over it),
// never replacing what the path names when that is not a regular file. A FIFO or a character device
// (/dev/null, /dev/stdout on a terminal or pipe) is a stream the user asked for and is written in
// place; a folder, a socket or a block device is refused. A symbolic link is followed: the file it
// points at is replaced, and the link stays a link.
#include <filesystem>
#include <functional>
#include <ostream>
#include <vector>

namespace mosaic {

// Where writing `path` lands.
struct OutputPlace {
  std::filesystem::path file;  // the file written: `path` with its links followed
  bool in_place = false;       // a stream (FIFO, character device), opened and written as it is
};

// Throws IoError naming `path` when it names something an output may not replace (a folder, a
// socket, a block device), or a chain of links that does not end.
OutputPlace output_place(const std::filesystem::path& path);

// Writes `path` all or nothing as above. On any failure the temporary is removed and the old file
// (if any) is untouched; a stream may have received part of the body. Throws IoError.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

// Several files written into one folder all or nothing: they are written into a staging folder beside
// it, then moved in (renames, which a full disk cannot stop). A folder that did not exist appears
// whole or not at all; files of an existing folder that are not written again stay.
class StagedFolder {
 public:
  explicit StagedFolder(const std::filesystem::path& dir);  // throws IoError when the staging folder cannot be made
  ~StagedFolder();                                          // removes the staging folder unless published
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;

  const std::filesystem::path& path() const { return staging_; }  // write the files here
  // Moves every staged file into the folder. Before anything moves, refuses (InvalidArgument naming
  // `flag`) when one of them would replace a path in `keep` (a command's inputs, under any name) or
  // something that is not a regular file.
  void publish(const std::string& flag, const std::vector<std::filesystem::path>& keep);

 private:
  std::filesystem::path dir_, staging_;
  bool published_ = false;
};

}  // namespace mosaic
