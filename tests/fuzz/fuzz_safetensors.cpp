// The safetensors header and offsets: the 8-byte length, the JSON header, every tensor's dtype,
// shape and byte range, checked against the file's size.
#include "fuzz_target.h"
#include "model/dtype.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mosaic;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const auto layout = fuzz::accepted([&] { return parse_safetensors_layout(bytes, "model.safetensors"); });
  if (!layout) return 0;
  // What the loader promises the engine: tensors in order, contiguous, inside the file, and each
  // exactly as large as its shape and dtype say.
  if (layout->data_offset > size) fuzz::violated("data section starts past the end of the file");
  std::uint64_t cursor = 0;
  for (const TensorInfo& t : layout->tensors) {
    if (t.begin != cursor || t.end < t.begin) fuzz::violated("tensors are not contiguous");
    if (static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype) != t.nbytes()) fuzz::violated("byte range disagrees with the shape");
    cursor = t.end;
  }
  if (cursor != size - layout->data_offset) fuzz::violated("tensors do not cover the data section");
  return 0;
}
