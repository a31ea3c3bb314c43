#pragma once
// y = x · wᵀ for the few-row products a decode step is made of (x [M, K] with M small, w [N, K]):
// each row of w is read once from memory and multiplied against every row of x held in cache.
// OpenBLAS packs w before every call, which for M ≥ 2 costs about as much as the product itself.
// Each product is summed the same way whatever M is and however [n0, n1) is cut, so a sequence's
// values do not depend on the batch it decodes in or on the thread count.
// No LibTorch; the CPU backend splits N over its threads.
#include <cstdint>

namespace mosaic {

// Rows [n0, n1) of y ([M, N], row-major) for x [M, K] and w [N, K], both row-major.
void skinny_gemm(const float* x, std::int64_t M, std::int64_t K, const float* w, std::int64_t n0, std::int64_t n1, float* y,
                 std::int64_t N);
// The same with w held in bf16 (the checkpoint's own dtype, half the bytes to stream), widened to
// fp32 in registers as it is read. The widening is exact, so y is skinny_gemm's over the widened
// weights, bit for bit.
void skinny_gemm_bf16(const float* x, std::int64_t M, std::int64_t K, const std::uint16_t* w, std::int64_t n0, std::int64_t n1,
                      float* y, std::int64_t N);

}  // namespace mosaic
