#pragma once
// Floating-point element conversion without LibTorch, for code that streams weights (analysis,
// synthetic checkpoints).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "model/dtype.h"

namespace mosaic {

// Converts `out.size()` elements of a floating dtype (BF16, F16, F32, F64) starting at `in` to fp32.
void to_float(DType dtype, const std::byte* in, std::span<float> out);

// Converts fp32 elements to a floating dtype (BF16, F16, F32, F64) at `out`, rounding to nearest even.
void from_float(DType dtype, std::span<const float> in, std::byte* out);

// The index of the first NaN or ±infinity among the elements of a floating dtype in `bytes`;
// nullopt when every element is finite (and for integer dtypes). One pass at memory speed.
std::optional<std::size_t> first_non_finite(DType dtype, std::span<const std::byte> bytes);

std::uint16_t float_to_bf16(float f);  // round to nearest even
std::uint16_t float_to_f16(float f);   // round to nearest even; tiny values flush to zero

}  // namespace mosaic
