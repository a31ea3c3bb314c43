#include "common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "common/error.h"
#include "common/path_identity.h"

namespace fs = std::filesystem;

namespace mosaic {
namespace {

// As many links as the kernel follows (ELOOP past it).
constexpr int kMaxLinks = 40;

// A path whose chain of links ends nowhere: the file a write creates is where the last link points,
// as a shell's `>` creates it.
fs::path dangling_target(fs::path p) {
  for (int i = 0; i < kMaxLinks; ++i) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::error_code ec;
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) return p;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  throw IoError(p.string(), "", "is a chain of symbolic links that does not end", "fix the link, or write somewhere else");
}

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string unique_suffix() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd());
}

}  // namespace

OutputPlace output_place(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return {path, true};
    if (!S_ISREG(st.st_mode))
      throw IoError(path.string(), "", "is " + kind_of(st.st_mode) + ": an output is written only to a file",
                    "name a regular file, or a FIFO or character device to stream to");
    // The file a link points at is replaced, not the link. A link canonical() cannot follow
    // (/dev/stdout onto a deleted file) is a stream of the caller's.
    std::error_code ec;
    const fs::path real = fs::canonical(path, ec);
    return ec ? OutputPlace{path, true} : OutputPlace{real, false};
  }
  if (errno == ELOOP) throw IoError(path.string(), "", "is a chain of symbolic links that does not end", "fix the link, or write somewhere else");
  return {dangling_target(path), false};
}

void write_file_atomically(const fs::path& path, const std::function<void(std::ostream&)>& write) {
  const OutputPlace place = output_place(path);
  if (place.in_place) {
    // Opening a FIFO waits for its reader, as a shell's `>` does.
    std::ofstream out(place.file, std::ios::binary);
    if (!out) throw IoError(path.string(), "", "cannot be opened for writing", "check its permissions");
    write(out);
    out.flush();
    if (!out) throw IoError(path.string(), "", "write failed", "check that its reader is still there");
    return;
  }
  fs::path tmp = place.file;
  tmp += ".tmp-" + unique_suffix();
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out)
        throw IoError(path.string(), "", "cannot create file",
                      "check that the folder exists and is writable");
      write(out);
      out.flush();
      if (!out) throw IoError(path.string(), "", "write failed", "check free disk space");
    }
    std::error_code ec;
    fs::rename(tmp, place.file, ec);
    if (ec) throw IoError(path.string(), "", "cannot move into place: " + ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
}

StagedFolder::StagedFolder(const fs::path& dir) : dir_(dir.has_filename() ? dir : dir.parent_path()) {
  // Staged on the file system its files end on, so that moving them in is a rename: inside a folder
  // that exists (it may be a mount point: a USB stick's root, a container's volume, whose parent is
  // on another device), beside one that does not.
  std::error_code ec;
  const bool inside = fs::is_directory(dir_, ec);
  const fs::path where = inside ? dir_ : dir_.parent_path();
  staging_ = where / ("." + (inside ? std::string("mosaic") : dir_.filename().string()) + ".tmp-" + unique_suffix());
  if (!fs::create_directory(staging_, ec))
    throw IoError(staging_.string(), "", "cannot create the staging folder: " + (ec ? ec.message() : std::string("it exists")),
                  "check that " + (where.empty() ? std::string(".") : where.string()) + " is writable");
}

StagedFolder::~StagedFolder() {
  std::error_code ec;
  if (!published_) fs::remove_all(staging_, ec);
}

void StagedFolder::publish(const std::string& flag, const std::vector<fs::path>& keep) {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    fs::rename(staging_, dir_, ec);
    if (ec) throw IoError(dir_.string(), "", "cannot move the finished folder into place: " + ec.message(), "check that its parent is writable");
    published_ = true;
    return;
  }
  if (!fs::is_directory(dir_, ec))
    throw InvalidArgument(flag, dir_.string(), "exists and is not a folder", "name a folder, or a path that does not exist yet");
  // Every destination is checked before the first file moves, so a refusal leaves the folder as it was.
  std::vector<std::pair<fs::path, fs::path>> moves;  // staged file, where it goes
  for (const auto& entry : fs::directory_iterator(staging_)) {
    const fs::path dest = dir_ / entry.path().filename();
    // (The staging folder itself may lie inside dir_: it is not among its own entries.)
    for (const fs::path& k : keep)
      if (!k.empty() && (same_file(dest, k) || canonical_or_self(dest) == canonical_or_self(k)))
        throw InvalidArgument(flag, dir_.string(), "would write " + entry.path().filename().string() + " over " + k.string() + ", one of this command's inputs",
                              "write the output to another folder");
    OutputPlace place;
    try {
      place = output_place(dest);
    } catch (const IoError& e) {
      throw InvalidArgument(flag, dest.string(), e.problem(), "remove it, or write the output to another folder");
    }
    if (place.in_place)
      throw InvalidArgument(flag, dest.string(), "is not a regular file, and a folder's files are replaced whole", "remove it, or write the output to another folder");
    moves.emplace_back(entry.path(), place.file);
  }
  for (const auto& [from, to] : moves) {
    fs::rename(from, to, ec);
    if (ec) throw IoError(to.string(), "", "cannot move into place: " + ec.message(), "check that the folder is writable");
  }
  fs::remove(staging_, ec);
  published_ = true;
}

}  // namespace mosaic
