// simt, the CPU executor the kernels' suite runs on without a GPU (tests/simt/simt.h): its collectives,
// barriers, grids and launch checks give what a GPU gives, and what a GPU would hang on is reported.
#include <QTest>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <random>
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

  // What the CUDA backend runs on simt beyond its kernels (simt/streams.h, driver.cpp, cublas.cpp).

  void aCapturedStreamKeepsItsWorkForTheGraph() {
    cudaStream_t s = nullptr;
    QCOMPARE(int(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)), 0);
    Buffer<int> out(4), copy(4);
    int* host = nullptr;
    QCOMPARE(int(cudaHostAlloc(&host, 4 * sizeof(int), cudaHostAllocDefault)), 0);
    QCOMPARE(int(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)), 0);
    cudaStreamCaptureStatus status{};
    QCOMPARE(int(cudaStreamIsCapturing(s, &status)), 0);
    QCOMPARE(status, cudaStreamCaptureStatusActive);
    // A launch (its arguments as they are now), then a copy of what it wrote, then one from the host
    // (read when the graph runs): nothing happens until then.
    QCOMPARE(simt_probe::own_arguments_on(s, 4, 10, out.p), 0);
    QCOMPARE(int(cudaMemcpyAsync(copy.p, out.p, 4 * sizeof(int), cudaMemcpyDeviceToDevice, s)), 0);
    QCOMPARE(int(cudaMemcpyAsync(out.p + 3, host, sizeof(int), cudaMemcpyHostToDevice, s)), 0);
    cudaGraph_t graph = nullptr;
    QCOMPARE(int(cudaStreamEndCapture(s, &graph)), 0);
    QCOMPARE(out.get(), std::vector<int>(4, 0));
    cudaGraphExec_t exec = nullptr;
    QCOMPARE(int(cudaGraphInstantiate(&exec, graph, 0)), 0);
    cudaGraphDestroy(graph);
    for (int round = 0; round < 2; ++round) {
      host[0] = 100 + round;
      QCOMPARE(int(cudaGraphLaunch(exec, s)), 0);
      QCOMPARE(int(cudaStreamSynchronize(s)), 0);
      QCOMPARE(copy.get(), (std::vector<int>{10, 11, 12, 13}));
      QCOMPARE(out.get(), (std::vector<int>{10, 11, 12, 100 + round}));
    }
    cudaGraphExecDestroy(exec);
    cudaFreeHost(host);
    cudaStreamDestroy(s);
  }

  void aCaptureRefusesWhatCudaRefusesInIt() {
    // Allocating, a synchronous copy or waiting while a thread captures fails the call and then the
    // capture, as CUDA's thread-local capture mode does; the stream works again after it.
    cudaStream_t s = nullptr;
    cudaStreamCreate(&s);
    Buffer<int> out(1);
    for (int which = 0; which < 4; ++which) {
      QCOMPARE(int(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)), 0);
      void* p = nullptr;
      int host = 0;
      const cudaError_t e = which == 0 ? cudaMalloc(&p, 64)
                            : which == 1 ? cudaMemcpy(&host, out.p, sizeof(int), cudaMemcpyDeviceToHost)
                            : which == 2 ? cudaStreamSynchronize(s)
                                         : cudaDeviceSynchronize();
      QVERIFY(e != cudaSuccess);
      QVERIFY(p == nullptr);
      cudaGraph_t graph = nullptr;
      QCOMPARE(int(cudaStreamEndCapture(s, &graph)), int(cudaErrorStreamCaptureInvalidated));
      QVERIFY(graph == nullptr);
    }
    QCOMPARE(simt_probe::own_arguments_on(s, 1, 5, out.p), 0);
    QCOMPARE(int(cudaStreamSynchronize(s)), 0);
    QCOMPARE(out.get(), std::vector<int>{5});
    // An event records into a graph only as an External node, and only inside a capture.
    cudaEvent_t e = nullptr;
    cudaEventCreate(&e);
    QCOMPARE(int(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal)), int(cudaErrorInvalidValue));
    cudaEventDestroy(e);
    cudaStreamDestroy(s);
  }

  void eventsTimeWhatRanBetweenThem() {
    cudaStream_t s = nullptr;
    cudaStreamCreate(&s);
    cudaEvent_t start = nullptr, stop = nullptr, untimed = nullptr;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
    float ms = -1;
    QCOMPARE(int(cudaEventElapsedTime(&ms, start, stop)), int(cudaErrorInvalidResourceHandle));  // not recorded yet
    Buffer<int> out(256);
    QCOMPARE(int(cudaEventRecord(start, s)), 0);
    for (int i = 0; i < 50; ++i) simt_probe::own_arguments_on(s, 256, i, out.p);
    QCOMPARE(int(cudaEventRecord(stop, s)), 0);
    QCOMPARE(int(cudaEventRecord(untimed, s)), 0);
    QCOMPARE(int(cudaEventElapsedTime(&ms, start, stop)), int(cudaErrorNotReady));  // queued: nothing has run
    QCOMPARE(int(cudaEventQuery(stop)), int(cudaErrorNotReady));  // not when asked; by the next time
    QCOMPARE(int(cudaEventQuery(stop)), 0);
    QCOMPARE(int(cudaEventElapsedTime(&ms, start, stop)), 0);
    QVERIFY(ms > 0);
    QCOMPARE(int(cudaEventElapsedTime(&ms, start, untimed)), int(cudaErrorInvalidResourceHandle));
    for (cudaEvent_t e : {start, stop, untimed}) cudaEventDestroy(e);
    cudaStreamDestroy(s);
  }

  void aStreamRunsWhenSomethingWaitsForIt() {
    // Work on one stream reaches another only through an event it waits for: without the wait the
    // reader copies what was there before (as a GPU might, the race lost), with it what was written.
    cudaStream_t writer = nullptr, reader = nullptr;
    cudaStreamCreateWithFlags(&writer, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking);
    cudaEvent_t written = nullptr;
    cudaEventCreateWithFlags(&written, cudaEventDisableTiming);
    Buffer<int> data(2), seen(2);
    for (const bool wait : {false, true}) {
      cudaMemset(data.p, 0, 2 * sizeof(int));
      QCOMPARE(simt_probe::own_arguments_on(writer, 2, wait ? 7 : 3, data.p), 0);
      QCOMPARE(int(cudaEventRecord(written, writer)), 0);
      if (wait) QCOMPARE(int(cudaStreamWaitEvent(reader, written, 0)), 0);
      QCOMPARE(int(cudaMemcpyAsync(seen.p, data.p, 2 * sizeof(int), cudaMemcpyDeviceToDevice, reader)), 0);
      QCOMPARE(int(cudaStreamSynchronize(reader)), 0);
      QCOMPARE(seen.get(), wait ? (std::vector<int>{7, 8}) : (std::vector<int>{0, 0}));
      QCOMPARE(int(cudaStreamSynchronize(writer)), 0);
      QCOMPARE(data.get(), wait ? (std::vector<int>{7, 8}) : (std::vector<int>{3, 4}));
    }
    // Into pageable host memory a copy returns done (the stream's work before it run); from pageable
    // memory it is staged as it is made.
    int host[2] = {0, 0};
    QCOMPARE(simt_probe::own_arguments_on(writer, 2, 20, data.p), 0);
    QCOMPARE(int(cudaMemcpyAsync(host, data.p, sizeof host, cudaMemcpyDeviceToHost, writer)), 0);
    QCOMPARE(host[1], 21);
    QCOMPARE(int(cudaMemcpyAsync(data.p, host, sizeof host, cudaMemcpyHostToDevice, writer)), 0);
    host[0] = -1;
    QCOMPARE(int(cudaStreamSynchronize(writer)), 0);
    QCOMPARE(data.get(), (std::vector<int>{20, 21}));
    cudaEventDestroy(written);
    cudaStreamDestroy(writer);
    cudaStreamDestroy(reader);
  }

  void virtualMemoryMapsOnePageUnderTwoAddresses() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    QCOMPARE(int(cudaGetDriverEntryPointByVersion("cuMemMap", &fn, 12000, cudaEnableDefault, &found)), 0);
    QVERIFY(found == cudaDriverEntryPointSuccess && fn == reinterpret_cast<void*>(&cuMemMap));
    QCOMPARE(int(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, cudaEnableDefault, &found)), 0);
    QVERIFY(found != cudaDriverEntryPointSuccess && !fn);

    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    std::size_t page = 0;
    QCOMPARE(int(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)), 0);
    QCOMPARE(page, std::size_t(2) << 20);
    CUmemGenericAllocationHandle h{};
    QCOMPARE(int(cuMemCreate(&h, page, &prop, 0)), 0);
    CUdeviceptr range = 0;
    QCOMPARE(int(cuMemAddressReserve(&range, 3 * page, 0, 0, 0)), 0);
    QCOMPARE(range % page, 0ull);
    const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    QCOMPARE(int(cuMemSetAccess(range, page, &access, 1)), int(CUDA_ERROR_INVALID_VALUE));  // nothing mapped there
    QCOMPARE(int(cuMemMap(range, page, 0, h, 0)), 0);
    QCOMPARE(int(cuMemMap(range, page, 0, h, 0)), int(CUDA_ERROR_INVALID_VALUE));  // mapped already
    QCOMPARE(int(cuMemMap(range + 2 * page, 2 * page, 0, h, 0)), int(CUDA_ERROR_INVALID_VALUE));  // past the reservation
    QCOMPARE(int(cuMemMap(range + 2 * page, page, 0, h, 0)), 0);
    for (CUdeviceptr at : {range, range + 2 * page}) QCOMPARE(int(cuMemSetAccess(at, page, &access, 1)), 0);
    auto* first = reinterpret_cast<float*>(range);
    auto* third = reinterpret_cast<float*>(range + 2 * page);
    QVERIFY(std::isnan(first[7]));  // garbage until written, as device memory is
    first[7] = 3.5f;
    QCOMPARE(third[7], 3.5f);  // one page under both
    QCOMPARE(int(cuMemRelease(h)), 0);  // the mappings keep it
    QCOMPARE(third[7], 3.5f);
    QCOMPARE(int(cuMemAddressFree(range, 3 * page)), int(CUDA_ERROR_INVALID_VALUE));  // pages still mapped in it
    for (CUdeviceptr at : {range, range + 2 * page}) QCOMPARE(int(cuMemUnmap(at, page)), 0);
    QCOMPARE(int(cuMemUnmap(range, page)), int(CUDA_ERROR_INVALID_VALUE));
    QCOMPARE(int(cuMemAddressFree(range, 3 * page)), 0);
  }

  void cublasGemmExComputesWhatCublasDoes() {
    // C (m × n, column-major, ldc > m) = alpha · Aᵀ · B + beta · C with bf16 A and B and fp32 C, as
    // the backend calls it; and beta 0 does not read C's garbage.
    const int m = 5, n = 3, k = 7, lda = 9, ldb = 8, ldc = 6;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<__nv_bfloat16> a(std::size_t(lda) * m), b(std::size_t(ldb) * n);
    for (auto& x : a) x = __float2bfloat16_rn(u(rng));
    for (auto& x : b) x = __float2bfloat16_rn(u(rng));
    std::vector<float> c(std::size_t(ldc) * n, 1.0f);
    cublasHandle_t h = nullptr;
    QCOMPARE(int(cublasCreate(&h)), 0);
    const float alpha = 2.0f, beta = 0.5f, zero = 0.0f;
    QCOMPARE(int(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_16BF, lda, b.data(), CUDA_R_16BF, ldb, &beta,
                              c.data(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)),
             0);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < ldc; ++i) {
        double want = 1.0;  // rows past m are not C's
        if (i < m) {
          double dot = 0;
          for (int p = 0; p < k; ++p) dot += double(__bfloat162float(a[std::size_t(p + i * lda)])) * __bfloat162float(b[std::size_t(p + j * ldb)]);
          want = 2.0 * dot + 0.5;
        }
        QVERIFY2(std::abs(c[std::size_t(i + j * ldc)] - want) <= 1e-5, qPrintable(QStringLiteral("(%1, %2)").arg(i).arg(j)));
      }
    std::vector<float> garbage(std::size_t(ldc) * n, std::nanf(""));
    QCOMPARE(int(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_16BF, lda, b.data(), CUDA_R_16BF, ldb, &zero,
                              garbage.data(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)),
             0);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) QVERIFY(std::isfinite(garbage[std::size_t(i + j * ldc)]));
    QCOMPARE(int(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_16BF, k - 1, b.data(), CUDA_R_16BF, ldb, &beta,
                              c.data(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)),
             int(CUBLAS_STATUS_INVALID_VALUE));  // lda under k
    cublasDestroy(h);
  }
};

QTEST_GUILESS_MAIN(TestSimt)
#include "tst_simt.moc"
