#include "runtime/threads.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/error.h"

namespace mosaic {
int configure_threads(int n) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n <= 0) n = cores;
  // More threads than a few per core only time-slice the same cores (100000 of them took minutes to start).
  if (n > 4 * cores)
    throw InvalidArgument("--threads", std::to_string(n), "is more than 4 per core on this machine (" + std::to_string(cores) + " cores)",
                          "give at most " + std::to_string(4 * cores) + ", or 0 for one per core");
  at::set_num_threads(n);
  return at::get_num_threads();
}

int configured_threads() { return at::get_num_threads(); }

void parallel_ranges(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f) { at::parallel_for(0, n, 1, f); }

void on_passing_thread(const std::function<void()>& f) {
  std::exception_ptr thrown;
  std::thread([&] {
    try {
      f();
    } catch (...) {
      thrown = std::current_exception();
    }
  }).join();
  if (thrown) std::rethrow_exception(thrown);
}

int parallel_for_threads() {
  std::mutex m;
  std::set<std::thread::id> seen;
  parallel_ranges(64, [&](std::int64_t, std::int64_t) {
    // Long enough that no thread takes every range before the others start.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const std::lock_guard lock(m);
    seen.insert(std::this_thread::get_id());
  });
  return static_cast<int>(seen.size());
}
}  // namespace mosaic
