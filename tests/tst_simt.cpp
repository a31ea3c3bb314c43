// simt, the CPU executor the kernels' suite runs on without a GPU (tests/simt/simt.h): its collectives,
// barriers, grids and launch checks give what a GPU gives, and what a GPU would hang on is reported.
#include <QTest>

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "simt/probe_kernels.h"

namespace {

template <class T>
struct Buffer {
  T* p = nullptr;
  std::size_t n;
  explicit Buffer(std::size_t count) : n(count) {
    cudaMalloc(&p, n * sizeof(T));
    cudaMemset(p, 0, n * sizeof(T));
  }
  ~Buffer() { cudaFree(p); }
  std::vector<T> get() const { return std::vector<T>(p, p + n); }
};

}  // namespace

class TestSimt : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void warpCollectivesGiveWhatTheGpuGives() {
    Buffer<int> out(64 * 8);
    QCOMPARE(simt_probe::collectives(out.p), 0);
    const auto o = out.get();
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32;
      const int* r = o.data() + t * 8;
      QCOMPARE(r[0], 31 * 32 / 2);
      QCOMPARE(r[1], lane * (lane + 1) / 2);
      QCOMPARE(unsigned(r[2]), 0xaaaaaaaau);
      QCOMPARE(unsigned(r[3]), 0xfu << (lane / 4 * 4));
      QCOMPARE(r[4], 1);
      QCOMPARE(r[5], 1);
      QCOMPARE(r[6], lane % 8 == 7 ? lane * 10 : (lane + 1) * 10);  // past its segment: its own value
      QCOMPARE(r[7], (lane / 8 * 8 + 3) * 10);
    }
  }

  void aPartialWarpCollectsItsLanes() {
    Buffer<int> out(2);
    QCOMPARE(simt_probe::partial_warp(40, out.p), 0);
    QCOMPARE(out.get()[0], 31 * 32 / 2);
    QCOMPARE(out.get()[1], 32 + 33 + 34 + 35 + 36 + 37 + 38 + 39);
  }

  void barriersOrderSharedMemory() {
    for (int threads : {256, 96}) {
      Buffer<int> out(2 * std::size_t(threads));
      QCOMPARE(simt_probe::barrier(threads, 77, out.p), 0);
      const auto o = out.get();
      for (int t = 0; t < threads; ++t) {
        QCOMPARE(o[t], (t + 1) % threads * 3);
        QCOMPARE(o[threads + t], 1);
      }
      QCOMPARE(simt_probe::barrier(threads, -1, out.p), 0);
      QCOMPARE(out.get()[threads], 0);
    }
  }

  void exitedThreadsDoNotHoldABarrier() {
    Buffer<int> out(100);
    QCOMPARE(simt_probe::early_exit(256, 100, out.p), 0);
    for (int v : out.get()) QCOMPARE(v, 100);
  }

  void aLaneMissingFromACollectiveFailsTheLaunch() {
    Buffer<int> out(32);
    QCOMPARE(simt_probe::missing_lane(out.p), int(cudaErrorLaunchFailure));
    QCOMPARE(int(cudaGetLastError()), 0);  // reported once, as a launch error; the next launch runs
    QCOMPARE(simt_probe::partial_warp(32, out.p), 0);
  }

  void everyThreadOfTheGridRunsOnce() {
    const simt_probe::Shape grid{3, 2, 2}, block{8, 4, 2};
    Buffer<int> out(12 * 64);
    QCOMPARE(simt_probe::grid(grid, block, out.p), 0);
    for (int v : out.get()) QCOMPARE(v, 1);
  }

  void eachThreadHasItsOwnArguments() {
    Buffer<int> out(64);
    QCOMPARE(simt_probe::own_arguments(64, 5, out.p), 0);
    const auto o = out.get();
    for (int t = 0; t < 64; ++t) QCOMPARE(o[t], 5 + t);
  }

  void launchesAreCheckedAsTheGpuChecksThem() {
    Buffer<int> out(2048);
    QCOMPARE(simt_probe::own_arguments(0, 0, out.p), int(cudaErrorInvalidConfiguration));
    QCOMPARE(simt_probe::own_arguments(1025, 0, out.p), int(cudaErrorInvalidConfiguration));
    QCOMPARE(simt_probe::grid({0, 1, 1}, {1, 1, 1}, out.p), int(cudaErrorInvalidConfiguration));
    QCOMPARE(simt_probe::own_arguments(1024, 0, out.p), 0);
    // Dynamic shared memory past 48 KiB only after the kernel's attribute allows it, up to the opt-in.
    Buffer<float> f(64);
    QCOMPARE(simt_probe::dynamic_shared(64, 256, f.p), 0);
    for (float v : f.get()) QCOMPARE(v, 1.0f);
    QCOMPARE(simt_probe::dynamic_shared(64, 64 * 1024, f.p), int(cudaErrorInvalidValue));
    QCOMPARE(simt_probe::allow_dynamic_shared(300 * 1024), int(cudaErrorInvalidValue));
    QCOMPARE(simt_probe::allow_dynamic_shared(64 * 1024), 0);
    QCOMPARE(simt_probe::dynamic_shared(64, 64 * 1024, f.p), 0);
    QCOMPARE(simt_probe::allow_dynamic_shared(0), 0);  // back to the default for the cases after
  }

  void blocksTakeTheirThreadsBothWays() {
    // A missing barrier shows only where the thread that runs ahead reads what others write: blocks
    // alternate between their first thread and their last running ahead.
    const int blocks = 4, threads = 64;
    Buffer<int> tickets(blocks * threads), counters(blocks);
    QCOMPARE(simt_probe::start_order(blocks, threads, tickets.p, counters.p), 0);
    const auto t = tickets.get();
    int forwards = 0, backwards = 0;
    for (int b = 0; b < blocks; ++b) {
      const int* own = t.data() + b * threads;
      if (own[0] == 0 && own[threads - 1] == threads - 1) ++forwards;
      if (own[threads - 1] == 0 && own[0] == threads - 1) ++backwards;
    }
    QCOMPARE(forwards, 2);
    QCOMPARE(backwards, 2);
  }

  void warpsRunAheadOfEachOther() {
    // A warp runs to its next __syncthreads before the other warps take a step, first to last or last
    // to first, so that a read of another warp's writes without a barrier finds them unwritten (warps
    // taking turns at every warp collective would hide it: they would move in step).
    const int blocks = 2;
    Buffer<int> tickets(blocks * 2 * 4), counters(blocks);
    QCOMPARE(simt_probe::warp_order(blocks, tickets.p, counters.p), 0);
    const auto t = tickets.get();
    const std::vector<int> first_warp_first{0, 1, 2, 3, 4, 5, 6, 7}, last_warp_first{4, 5, 6, 7, 0, 1, 2, 3};
    int forwards = 0, backwards = 0;
    for (int b = 0; b < blocks; ++b) {
      const std::vector<int> own(t.begin() + b * 8, t.begin() + b * 8 + 8);
      forwards += own == first_warp_first;
      backwards += own == last_warp_first;
    }
    QCOMPARE(forwards, 1);
    QCOMPARE(backwards, 1);
  }

  void deviceMemoryStartsAsGarbage() {
    // cudaMalloc gives NaNs, so that a kernel reading what nobody wrote fails its comparison.
    float* p = nullptr;
    QCOMPARE(int(cudaMalloc(&p, 16 * sizeof(float))), 0);
    for (int i = 0; i < 16; ++i) QVERIFY(std::isnan(p[i]));
    cudaFree(p);
  }
};

QTEST_GUILESS_MAIN(TestSimt)
#include "tst_simt.moc"
