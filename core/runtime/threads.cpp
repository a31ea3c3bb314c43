#include "runtime/threads.h"

#include <ATen/Parallel.h>

#include <thread>

namespace mosaic {
int configure_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(n);
  return at::get_num_threads();
}
}  // namespace mosaic
