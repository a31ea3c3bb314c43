#include "runtime/clock.h"

#include <thread>

namespace mosaic {
namespace {

using Steady = std::chrono::steady_clock;

class RealClock final : public Clock {
 public:
  bool is_virtual() const override { return false; }
  double now() const override { return std::chrono::duration<double>(Steady::now() - t0_).count(); }
  void worked(double) override {}
  void delay(double seconds) override {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
  void idle_until(double) override {}
  Steady::time_point wall_deadline(double t) const override {
    return t0_ + std::chrono::duration_cast<Steady::duration>(std::chrono::duration<double>(t));
  }

 private:
  Steady::time_point t0_ = Steady::now();
};

class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(double start) : now_(start) {}
  bool is_virtual() const override { return true; }
  double now() const override { return now_.load(); }
  void worked(double seconds) override { add(seconds); }
  void delay(double seconds) override { add(seconds); }
  void idle_until(double t) override {
    if (t > now_.load()) now_.store(t);
  }
  Steady::time_point wall_deadline(double) const override { return Steady::now(); }

 private:
  void add(double seconds) {
    if (seconds > 0) now_.store(now_.load() + seconds);  // only the engine thread moves it
  }
  std::atomic<double> now_;
};

}  // namespace

std::shared_ptr<Clock> make_real_clock() { return std::make_shared<RealClock>(); }
std::shared_ptr<Clock> make_virtual_clock(double start) { return std::make_shared<VirtualClock>(start); }

}  // namespace mosaic
