#pragma once
// A checkpoint's identity: the SHA-256 of its files' contents, so layouts and cached analyses can
// tell a changed checkpoint from an unchanged one wherever it has been copied to.
#include <filesystem>
#include <map>
#include <string>

#include "model/checkpoint.h"

namespace mosaic {

// Remembers file hashes by (absolute path, size, modification time) in a JSON file, as git's index
// does, so reopening an unchanged checkpoint does not read it again. The memo is only a cache: an
// unreadable store starts empty, and a file whose size or time changed is hashed afresh.
class FileHashMemo {
 public:
  explicit FileHashMemo(std::filesystem::path store);
  std::string hash(const std::filesystem::path& file);  // throws IoError
  void save() const;                                      // atomic; throws IoError
  std::size_t computed() const { return computed_; }      // files actually read by this object

 private:
  struct Entry {
    std::uintmax_t size = 0;
    long long mtime_ns = 0;
    std::string sha256;
  };
  std::filesystem::path store_;
  std::map<std::string, Entry> entries_;
  std::size_t computed_ = 0;
};

// SHA-256 over "<sha256 of file>  <file name>\n" for config.json and every weight file (and the
// shard index, when there is one), in name order — the digest of a `sha256sum` listing.
std::string checkpoint_sha256(const Checkpoint& checkpoint, FileHashMemo* memo = nullptr);

}  // namespace mosaic
