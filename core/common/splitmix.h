#pragma once
// splitmix64's step and finalizer: a 64-bit key mixed into well-spread bits (Steele, Lea and Flood
// 2014). Seeds drawn from a counter, and keyed random streams, both use it.
#include <cstdint>

namespace mosaic {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace mosaic
