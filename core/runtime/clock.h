#pragma once
// The engine's clock. Real: seconds of wall time since the engine started. Virtual: simulated
// arrivals on a clock that moves on by exactly the work the engine measures (each step's wall time),
// jumps over idle gaps to the next arrival, and charges costs a device would add (space-sharing's
// split copy bandwidth) without sleeping them out — so a sweep of high arrival rates finishes in
// service time, and queueing is what it would be on an engine this fast.
#include <atomic>
#include <chrono>
#include <memory>

namespace mosaic {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual bool is_virtual() const = 0;
  virtual double now() const = 0;  // thread-safe
  // The engine worked `seconds` of wall time (already spent).
  virtual void worked(double seconds) = 0;
  // A cost the device would add beyond the work measured here.
  virtual void delay(double seconds) = 0;
  // Idle with nothing to do before `t`: virtual jumps there; real returns at once (the engine waits
  // on its own condition until the wall-clock deadline, wall_deadline(t)).
  virtual void idle_until(double t) = 0;
  virtual std::chrono::steady_clock::time_point wall_deadline(double t) const = 0;
};

std::shared_ptr<Clock> make_real_clock();
std::shared_ptr<Clock> make_virtual_clock(double start = 0);

}  // namespace mosaic
