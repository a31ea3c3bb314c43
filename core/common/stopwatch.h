#pragma once
// Seconds elapsed on the steady clock, the one measure every timing in Mosaic takes.
#include <chrono>

namespace mosaic {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace mosaic
