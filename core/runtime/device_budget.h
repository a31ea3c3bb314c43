#pragma once
// The device's byte budget. Every device allocation is reserved here first; on the CPU backend the
// budget is enforced by this accounting alone (the copies into "device" buffers are real).
#include <cstdint>
#include <limits>
#include <string>

namespace mosaic {

class DeviceBudget {
 public:
  static constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();
  explicit DeviceBudget(std::uint64_t budget_bytes = kUnlimited) : budget_(budget_bytes) {}

  // Throws BudgetError naming `what`, the bytes asked for, those in use and the budget.
  void reserve(std::uint64_t bytes, const std::string& what);
  void release(std::uint64_t bytes);

  std::uint64_t budget() const { return budget_; }
  std::uint64_t used() const { return used_; }
  std::uint64_t peak() const { return peak_; }
  std::uint64_t available() const { return budget_ - used_; }

 private:
  std::uint64_t budget_, used_ = 0, peak_ = 0;
};

}  // namespace mosaic
