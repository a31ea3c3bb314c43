#pragma once
// main() of a `gpu` suite: exits 77 (CTest's SKIP_RETURN_CODE) when no CUDA device can run, saying
// why, so that a machine without a GPU reports the suite skipped, never passed.
#include <QTest>

#if defined(MOSAIC_SIMT)
// The same suite on simt, the kernels' CPU executor (tests/simt/simt.h): its device is always there.
#define MOSAIC_GPU_TEST_MAIN(Suite) QTEST_GUILESS_MAIN(Suite)
#else
#include <cstdio>

#include "runtime/device.h"

#define MOSAIC_GPU_TEST_MAIN(Suite)                                                              \
  int main(int argc, char** argv) {                                                              \
    if (const auto why = mosaic::device_unavailable(mosaic::Device::Cuda)) {                     \
      std::printf("SKIP %s: %s\n", #Suite, why->c_str());                                        \
      return 77;                                                                                 \
    }                                                                                            \
    QCoreApplication app(argc, argv);                                                            \
    Suite suite;                                                                                 \
    return QTest::qExec(&suite, argc, argv);                                                     \
  }
#endif
