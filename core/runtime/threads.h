#pragma once

namespace mosaic {
// LibTorch uses one intra-op thread on small machines unless told; call once at start-up.
// n <= 0: one thread per hardware core; more than 4 per core is refused (InvalidArgument). Returns
// the count in effect.
int configure_threads(int n = 0);
// The count in effect (configure_threads', else LibTorch's default), for host work beside LibTorch's too.
int configured_threads();
}  // namespace mosaic
