#pragma once
// Stands in for mma.h in simt builds: nvcuda::wmma's 16×16×16 tiles (bf16 or half inputs, float
// accumulators). A GPU spreads a fragment over its warp's lanes in a layout it does not document; here
// every lane holds the whole tile. Each *_sync is a warp collective (a lane that does not reach it is
// a deadlock), and a tile pointer that is not 32-byte aligned, or a leading dimension that is not a
// multiple of 16 bytes, fails the launch as misuse (undefined on a GPU). Code that touches a
// fragment's elements only through x[i], i < num_elements, every element alike, computes the same
// either way. Products are summed in k order, in float: a GPU's order differs, to float rounding.
#include <cstdint>
#include <type_traits>

#include "cuda_bf16.h"
#include "simt/simt.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "simt's wmma has the 16x16x16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float> : (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>),
                "simt's wmma multiplies bf16 or half into float");
  using element_type = T;
  static constexpr int num_elements = 256;
  T x[256];  // the tile by rows: a's [m][k], b's [k][n], the accumulator's [m][n]
};

namespace detail {

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float to_float(__half v) { return __half2float(v); }

template <class T>
void check_tile(const T* p, unsigned ldm) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0) simt::detail::misuse("reads or writes a wmma tile at an address not 32-byte aligned");
  if (ldm * sizeof(T) % 16 != 0) simt::detail::misuse("gives a wmma tile a leading dimension that is not a multiple of 16 bytes");
}

// Element (r, c) of a tile stored with rows `row_major` apart by ldm, else columns.
template <class T>
T& at(T* p, unsigned ldm, int r, int c, bool row_major) {
  return row_major ? p[static_cast<std::size_t>(r) * ldm + c] : p[static_cast<std::size_t>(c) * ldm + r];
}

}  // namespace detail

template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T v) {
  for (T& e : f.x) e = v;
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator is loaded with its layout");
  __syncwarp();
  detail::check_tile(p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = detail::at(p, ldm, r, c, std::is_same_v<Layout, row_major>);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout) {
  __syncwarp();
  detail::check_tile(p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = detail::at(p, ldm, r, c, layout == mem_row_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
  __syncwarp();
  detail::check_tile(p, ldm);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) detail::at(p, ldm, r, c, layout == mem_row_major) = f.x[r * 16 + c];
}

template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  __syncwarp();
  float out[256];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float sum = c.x[m * 16 + n];
      for (int k = 0; k < 16; ++k) sum += detail::to_float(a.x[m * 16 + k]) * detail::to_float(b.x[k * 16 + n]);
      out[m * 16 + n] = sum;
    }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
