#pragma once
// The rate this machine reads memory at, as a streaming kernel could: the floor of what a decode step
// that reads its weights or its KV cache can take.
#include <cstddef>

namespace mosaic::cli {

// Reading `bytes` with every intra-op thread, the best of 5 (a sum, so that nothing is optimised
// away): from memory for 1 GiB, from a large last-level cache for less. GB/s.
double read_gbs(std::size_t bytes);

}  // namespace mosaic::cli
