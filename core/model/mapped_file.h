#pragma once
#include <cstddef>
#include <filesystem>
#include <span>

namespace mosaic {

// A read-only memory map of a whole file. Move-only; unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws IoError
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// Gives the whole pages inside `bytes` (a span of a read-only mapping) back to the kernel: the file
// keeps the data, the page cache may too, but this process's resident memory no longer counts
// them. A reader streaming a file larger than RAM through a mapping calls it on what it has used.
void release_pages(std::span<const std::byte> bytes);

}  // namespace mosaic
