#pragma once
// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON describing each
// tensor (dtype, shape, [begin, end) within the data section), then the data section.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/dtype.h"
#include "model/mapped_file.h"

namespace mosaic {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte range within the data section

  std::int64_t numel() const;
  std::uint64_t nbytes() const { return end - begin; }
};

// What a safetensors file's header says, validated against the file's size: every tensor (ordered by
// offset, covering the data section exactly once), the metadata, and where the data section starts.
struct SafetensorsLayout {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  std::uint64_t data_offset = 0;
};

// Reads the header of the whole file `bytes`. Every layout violation is a FormatError naming `file`
// and the tensor. Pure, so it can be fuzzed without touching the filesystem.
SafetensorsLayout parse_safetensors_layout(std::span<const std::byte> bytes, const std::string& file);

// A memory-mapped, fully validated safetensors file. Views into it are zero-copy and stay valid
// while the object lives. Every layout violation is a FormatError naming the file and tensor.
class SafetensorsFile {
 public:
  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation

  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // ordered by offset
  const TensorInfo* find(std::string_view name) const;                 // nullptr if absent
  std::span<const std::byte> data(const TensorInfo& t) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::uint64_t data_bytes() const { return data_.size(); }

 private:
  std::filesystem::path path_;
  MappedFile map_;
  std::span<const std::byte> data_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// The header entry of one tensor to write.
struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t nbytes() const;
};

// One tensor to write with its bytes, already in `dtype`, row-major.
struct TensorBytes {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

// Gives tensor `index`'s bytes when the writer reaches it; the span must stay valid until the next
// call. Lets a checkpoint larger than memory be written one tensor at a time.
using TensorSource = std::function<std::span<const std::byte>(std::size_t index)>;

// Writes a safetensors file atomically (all or nothing). Throws InvalidArgument when a tensor's
// byte count disagrees with its shape, IoError when the file cannot be written.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorEntry> entries,
                       const TensorSource& source, const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::filesystem::path& path, std::span<const TensorBytes> tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mosaic
