#include "model/safetensors.h"

#include "common/json_text.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"

namespace mosaic {
namespace {

using nlohmann::json;
constexpr const char* kResave = "the file is corrupt: re-download it or save it again";

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

// Parses one tensor entry of the header; checks everything that needs no other entry.
TensorInfo parse_entry(const std::string& file, const std::string& name, const json& e,
                       std::uint64_t data_size) {
  auto bad = [&](const std::string& what) { return FormatError(file, "tensor '" + name + "'", what, kResave); };
  if (!e.is_object()) throw bad("header entry is not an object");
  TensorInfo t;
  t.name = name;

  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) throw bad("missing or non-string 'dtype'");
  const auto parsed = parse_dtype(dt->get<std::string>());
  const std::string dtype_name = dt->get<std::string>();
  if (!parsed && (dtype_name.starts_with("F8") || dtype_name.starts_with("F6") || dtype_name.starts_with("F4")))
    throw UnsupportedError(file, "tensor '" + name + "'", "is " + dtype_name + ", a quantized format",
                           "Mosaic serves unquantized BF16, F16, F32 or F64 weights: use the model's BF16 release, or "
                           "dequantize the checkpoint first; DeepSeek-V3's inference/fp8_cast_bf16.py does so for FP8 blocks");
  if (!parsed)
    throw FormatError(file, "tensor '" + name + "'", "unknown dtype '" + dtype_name + "'",
                      "Mosaic reads BF16, F16, F32, F64, I64, I32, I16, I8, U8 and BOOL; convert the "
                      "checkpoint to one of them");
  t.dtype = *parsed;

  const auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) throw bad("missing or non-array 'shape'");
  // Every partial product of the dimensions fits int64 (TensorInfo::numel multiplies in order), and
  // so does the byte count: a zero dimension does not excuse [2^62, 4, 0].
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t numel = 1, product = 1;
  for (const json& d : *sh) {
    if (!d.is_number_unsigned()) throw bad("shape holds a value that is not a non-negative integer");
    const std::uint64_t n = d.get<std::uint64_t>();
    if (n > kMax) throw bad("shape has a dimension past 2^63");
    if (n != 0 && product > kMax / n) throw bad("shape overflows");
    product = n == 0 ? product : product * n;
    numel *= n;
    t.shape.push_back(static_cast<std::int64_t>(n));
  }
  if (numel > kMax / dtype_size(t.dtype)) throw bad("shape overflows");

  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw bad("'data_offsets' is not a pair of non-negative integers");
  t.begin = (*off)[0].get<std::uint64_t>();
  t.end = (*off)[1].get<std::uint64_t>();
  if (t.begin > t.end) throw bad("data_offsets begin after they end");
  if (t.end > data_size)
    throw FormatError(file, "tensor '" + name + "'",
                      "data ends at byte " + std::to_string(t.end) + " of the data section, past its end (" +
                          std::to_string(data_size) + " bytes): the file is truncated or its offsets are wrong",
                      kResave);
  const std::uint64_t want = numel * dtype_size(t.dtype);
  if (t.nbytes() != want)
    throw bad("holds " + std::to_string(t.nbytes()) + " bytes but shape × element size is " +
              std::to_string(want));
  return t;
}

}  // namespace

std::int64_t TensorInfo::numel() const {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;  // before any product can overflow
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsLayout parse_safetensors_layout(std::span<const std::byte> bytes, const std::string& file) {
  if (bytes.size() < 8)
    throw FormatError(file, "", "file is " + std::to_string(bytes.size()) +
                                    " bytes, too short for a safetensors header", kResave);
  const std::uint64_t n = read_le64(bytes.data());
  if (n > SafetensorsFile::kMaxHeaderBytes)
    throw FormatError(file, "", "header length " + std::to_string(n) + " exceeds the format's limit of " +
                                    std::to_string(SafetensorsFile::kMaxHeaderBytes) + " bytes", kResave);
  if (n > bytes.size() - 8)
    throw FormatError(file, "", "header length " + std::to_string(n) + " is larger than the file (" +
                                    std::to_string(bytes.size()) + " bytes): truncated or not safetensors",
                      kResave);
  SafetensorsLayout layout;
  layout.data_offset = 8 + n;
  const std::uint64_t data_size = bytes.size() - layout.data_offset;

  json header;
  try {
    header = parse_json_bounded(std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), n), file);
  } catch (const json::exception& e) {
    throw FormatError(file, "", std::string("header is not valid JSON: ") + e.what(), kResave);
  }
  if (!header.is_object()) throw FormatError(file, "", "header is not a JSON object", kResave);

  auto& tensors = layout.tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw FormatError(file, "__metadata__", "is not an object", kResave);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw FormatError(file, "__metadata__." + k, "value is not a string", kResave);
        layout.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    tensors.push_back(parse_entry(file, name, entry, data_size));
  }

  // The data section must be covered exactly once: sorted by offset, each tensor starts where the
  // previous one ended, and the last ends at the end of the file.
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < cursor)
      throw FormatError(file, "tensor '" + t.name + "'",
                        "overlaps tensor '" + prev->name + "' (bytes " + std::to_string(t.begin) + ".." +
                            std::to_string(cursor) + ")", kResave);
    if (t.begin > cursor)
      throw FormatError(file, "tensor '" + t.name + "'",
                        "leaves a gap of " + std::to_string(t.begin - cursor) +
                            " unindexed bytes before it; tensors must be contiguous", kResave);
    cursor = t.end;
    prev = &t;
  }
  if (cursor != data_size)
    throw FormatError(file, "", std::to_string(data_size - cursor) +
                                    " trailing bytes after the last tensor are not described by the header",
                      kResave);
  return layout;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path), map_(path) {
  SafetensorsLayout layout = parse_safetensors_layout(map_.bytes(), path.string());
  data_ = map_.bytes().subspan(layout.data_offset);
  tensors_ = std::move(layout.tensors);
  metadata_ = std::move(layout.metadata);
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::data(const TensorInfo& t) const {
  return data_.subspan(t.begin, t.nbytes());
}

std::uint64_t TensorEntry::nbytes() const {
  std::uint64_t numel = 1;
  for (auto d : shape) numel *= static_cast<std::uint64_t>(d);
  return numel * dtype_size(dtype);
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorEntry> entries,
                       const TensorSource& source, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const TensorEntry& t : entries) {
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  write_file_atomically(path, [&](std::ostream& out) {
    std::uint64_t n = text.size();
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto bytes = source(i);
      if (bytes.size() != entries[i].nbytes())
        throw InvalidArgument(path.string(), "tensor '" + entries[i].name + "'",
                              std::to_string(bytes.size()) + " bytes given for a shape of " +
                                  std::to_string(entries[i].nbytes() / dtype_size(entries[i].dtype)) +
                                  " elements of " + std::string(dtype_name(entries[i].dtype)));
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
  });
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorBytes> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorEntry> entries;
  for (const TensorBytes& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  write_safetensors(path, entries, [&](std::size_t i) { return tensors[i].bytes; }, metadata);
}

}  // namespace mosaic
