#pragma once
#include <cstdint>
#include <functional>

namespace mosaic {
// LibTorch uses one intra-op thread on small machines unless told; call once at start-up.
// n <= 0: one thread per hardware core; more than 4 per core is refused (InvalidArgument). Returns
// the count in effect.
int configure_threads(int n = 0);
// The count in effect (configure_threads', else LibTorch's default), for host work beside LibTorch's too.
int configured_threads();
// f over ranges covering [0, n), at most one a thread (at::parallel_for, grain 1), on the intra-op
// threads. ATen's template is compiled where it is called, in parallel only with OpenMP: callers
// that pass their work as a std::function share this one copy, compiled in core with it.
void parallel_ranges(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f);
// f on a thread of its own, waited for; what it throws is rethrown here. For one-off parallel work
// (loading a model) off the threads that will step the engine: libgomp keeps a thread's OpenMP team
// for the thread's life, and once the threads it manages outnumber the cores it spins only briefly
// before sleeping, so every parallel region of a decode step then starts by waking its worker
// through the kernel (192 futex calls a step measured on the 0.6 B model; the loading's team gone,
// 98, and 0.3-1 ms a step less; docs/benchmarks.md).
void on_passing_thread(const std::function<void()>& f);
// How many distinct threads parallel_ranges ran 64 items on: the configured count where core was
// compiled with OpenMP, 1 under ThreadSanitizer, whose builds leave OpenMP out.
int parallel_for_threads();
}  // namespace mosaic
