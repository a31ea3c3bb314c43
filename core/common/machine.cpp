#include "common/machine.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "common/byte_size.h"

namespace mosaic {

std::string machine_description() {
  std::string cpu = "unknown CPU";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  utsname u{};
  ::uname(&u);
  return cpu + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " + format_bytes(physical_memory_bytes()) +
         ", " + u.sysname + " " + u.release + " " + u.machine;
}

std::uint64_t physical_memory_bytes() {
  return static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

const char* mosaic_version() { return MOSAIC_VERSION; }

std::string build_description() {
#ifdef NDEBUG
  const char* mode = "optimized";
#else
  const char* mode = "debug";
#endif
  return std::string("Mosaic ") + mosaic_version() + ", compiler " + __VERSION__ + ", " + mode;
}

std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace mosaic
