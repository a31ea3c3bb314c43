#pragma once
// What the device's memory delivers to a kernel that only reads: every 16-byte word of `bytes`
// (a multiple of 16) summed into *sink, so the reads cannot be elided. The yardstick of a decode
// step's floor (weights read ÷ read bandwidth).
#include <cstddef>

namespace mosaic::kernels {

int read_probe_cuda(const void* data, std::size_t bytes, unsigned* sink, void* stream);

}  // namespace mosaic::kernels
