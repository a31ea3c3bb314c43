#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

namespace mosaic {

// Element types a safetensors file may hold (the subset Mosaic reads and writes).
enum class DType { BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL };

std::optional<DType> parse_dtype(std::string_view name);  // "BF16" → BF16; unknown → nullopt
std::string_view dtype_name(DType d);
std::size_t dtype_size(DType d);  // bytes per element
bool is_floating(DType d);

}  // namespace mosaic
