#include "kernels/linear.h"

namespace mosaic::kernels {

void linear_reference(const float* x, int n, int in, const bf16_t* w, int out, const bf16_t* bias, bool accumulate, float* y) {
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < out; ++r) {
      double acc = bias ? bf16_to_float(bias[r]) : 0.0;
      for (int i = 0; i < in; ++i) acc += static_cast<double>(bf16_to_float(w[static_cast<std::int64_t>(r) * in + i])) * x[t * in + i];
      float& dst = y[static_cast<std::int64_t>(t) * out + r];
      dst = static_cast<float>((accumulate ? dst : 0.0) + acc);
    }
}

}  // namespace mosaic::kernels
