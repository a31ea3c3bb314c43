#pragma once

namespace mosaic {
// LibTorch uses one intra-op thread on small machines unless told; call once at start-up.
// n <= 0: one thread per hardware core; more than 4 per core is refused (InvalidArgument). Returns
// the count in effect.
int configure_threads(int n = 0);
}  // namespace mosaic
