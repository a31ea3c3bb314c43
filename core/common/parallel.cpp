#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mosaic {

unsigned thread_count(int requested) {
  return requested > 0 ? static_cast<unsigned>(requested) : std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t, unsigned)>& work,
                  const std::function<bool()>& stop) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex m;
  std::exception_ptr failure;
  auto run = [&](unsigned worker) {
    try {
      for (std::size_t i; !failed && !(stop && stop()) && (i = next++) < count;) work(i, worker);
    } catch (...) {
      std::lock_guard lock(m);
      if (!failure) failure = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  const unsigned n = std::min<std::size_t>(std::max(1u, threads), std::max<std::size_t>(count, 1));
  for (unsigned i = 1; i < n; ++i) pool.emplace_back(run, i);
  run(0);
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace mosaic
