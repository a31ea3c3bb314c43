#pragma once
// simt's streams, events and graphs: what Mosaic's CUDA backend calls beyond the kernels (simt.h says
// what simt is). A stream runs nothing until something waits for it, so work one stream reads from
// another reaches it only through what CUDA orders by: cudaStreamWaitEvent, an event or stream
// synchronized, cudaDeviceSynchronize, a free, a copy into pageable memory; a missing wait shows as
// stale data (NaNs where device memory was never written), where a GPU would race and mostly win.
// Work on the legacy stream (nullptr) runs at once, after what the blocking streams hold; a copy from
// pageable memory is staged when it is made, as CUDA stages it. cudaEventQuery of an event still
// queued answers cudaErrorNotReady once and runs its stream up to it, so pollers make progress.
// A stream being captured keeps its launches, copies and sets as the graph's nodes instead, with the
// arguments they had then, and the capture is checked as CUDA checks it: a call that would synchronize
// or allocate while a thread captures (cudaStreamCaptureModeThreadLocal) fails and invalidates it.
// Not modelled: streams running side by side (one thread runs everything), priorities, memory ordering.
#include <cstddef>

#include "simt/simt.h"

// ---- Streams and capture.
cudaError_t cudaStreamCreate(cudaStream_t* stream);
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0, cudaStreamCaptureStatusActive = 1, cudaStreamCaptureStatusInvalidated = 2 };
struct CUgraph_st;
struct CUgraphExec_st;
typedef CUgraph_st* cudaGraph_t;
typedef CUgraphExec_st* cudaGraphExec_t;
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);

// ---- Events: a recorded event holds the time it was reached.
struct CUevent_st;
typedef CUevent_st* cudaEvent_t;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
constexpr unsigned cudaEventRecordDefault = 0, cudaEventRecordExternal = 1;
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream = nullptr, unsigned flags = 0);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

// ---- Page-locked host memory: plain host memory.
constexpr unsigned cudaHostAllocDefault = 0;
cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned flags);
template <class T>
cudaError_t cudaHostAlloc(T** p, std::size_t bytes, unsigned flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), bytes, flags);
}
cudaError_t cudaFreeHost(void* p);

// ---- The device: the H100 simt stands for (simt::kMultiprocessors and the rest).
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
  int l2CacheSize;
};
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);

// ---- The driver's entry points (cuda.h's cuMem* functions, simt/driver.cpp).
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1, cudaDriverEntryPointVersionNotSufficent = 2 };
constexpr unsigned long long cudaEnableDefault = 0;
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned version, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status);

namespace simt {
// Bytes cudaMalloc and cudaHostAlloc hold now: a test checks its objects give back what they took.
std::size_t device_bytes_held();
}  // namespace simt
