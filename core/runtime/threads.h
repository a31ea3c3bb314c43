#pragma once

namespace mosaic {
// LibTorch uses one intra-op thread on small machines unless told; call once at start-up.
// n <= 0: one thread per hardware core; more than 4 per core is refused (InvalidArgument). Returns
// the count in effect.
int configure_threads(int n = 0);
// The count in effect (configure_threads', else LibTorch's default), for host work beside LibTorch's too.
int configured_threads();
// How many distinct threads at::parallel_for, as core's kernels call it, ran 64 ranges on: the
// configured count where core was compiled with OpenMP (ATen's template runs every range on the
// caller otherwise), 1 under ThreadSanitizer, whose builds leave OpenMP out.
int parallel_for_threads();
}  // namespace mosaic
