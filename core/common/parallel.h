#pragma once
// Plain std::thread work sharing for streaming jobs (analysis, hashing) that do not use LibTorch.
#include <cstddef>
#include <functional>

namespace mosaic {

// `requested` threads, or one per core when requested <= 0.
unsigned thread_count(int requested);

// Calls work(i, worker) for i in [0, count) from `threads` threads taking indices in order; worker
// in [0, threads) names the calling thread, for per-thread buffers. Stops handing out indices once
// `stop()` is true or a call throws; the first exception is rethrown here.
void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t, unsigned)>& work,
                  const std::function<bool()>& stop = {});

}  // namespace mosaic
