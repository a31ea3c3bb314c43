#include "runtime/device_budget.h"

#include "common/byte_size.h"
#include "common/error.h"

namespace mosaic {

void DeviceBudget::reserve(std::uint64_t bytes, const std::string& what) {
  if (bytes > budget_ - used_)
    throw BudgetError("device budget " + format_bytes(budget_), what,
                      "needs " + format_bytes(bytes) + " but only " + format_bytes(budget_ - used_) + " of " +
                          format_bytes(budget_) + " are free (" + format_bytes(used_) + " in use)",
                      "raise the budget, lower the layout's capacity, or use fewer miss slots");
  used_ += bytes;
  peak_ = std::max(peak_, used_);
}

void DeviceBudget::release(std::uint64_t bytes) { used_ -= std::min(bytes, used_); }

}  // namespace mosaic
