#include "kernels/launch.h"

#include <atomic>

namespace mosaic::kernels {
namespace {
std::atomic<bool> programmatic{false};
}

void set_programmatic_launches(bool on) { programmatic.store(on, std::memory_order_relaxed); }
bool programmatic_launches() { return programmatic.load(std::memory_order_relaxed); }

}  // namespace mosaic::kernels
