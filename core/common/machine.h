#pragma once
// One-line descriptions of where and with what a measurement was taken, for run records.
#include <cstdint>
#include <string>

namespace mosaic {
std::string machine_description();  // "AMD EPYC …, 2 cores, 23.4 GiB, Linux 6.1 x86_64"
std::string build_description();    // "Mosaic 0.1.0, GCC 12.2.0, Release"
const char* mosaic_version();       // "0.1.0": the top-level CMakeLists' project version
std::string utc_timestamp();        // "2026-11-22T16:51:24Z"
std::uint64_t physical_memory_bytes();  // the machine's RAM
}  // namespace mosaic
