#pragma once
// Times what a backend does: on the steady clock, or, for a backend that prices its work instead of
// doing it (Backend::device_seconds), on that device's own clock, so that the runtime's swap and
// step times and the engine's clock are the simulated device's, whatever this host took.
#include <chrono>
#include <optional>

#include "common/stopwatch.h"
#include "runtime/backend.h"

namespace mosaic {

class DeviceTimer {
 public:
  explicit DeviceTimer(const Backend& backend)
      : backend_(&backend), device_start_(backend.device_seconds()), wall_start_(std::chrono::steady_clock::now()) {}
  // Since construction.
  double seconds() const {
    if (device_start_) return backend_->device_seconds().value_or(*device_start_) - *device_start_;
    return seconds_since(wall_start_);
  }

 private:
  const Backend* backend_;
  std::optional<double> device_start_;
  std::chrono::steady_clock::time_point wall_start_;
};

}  // namespace mosaic
