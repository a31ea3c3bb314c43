// simt's memory, streams, events and graphs (streams.h says what they do and do not model).
#include "simt/streams.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

struct CUstream_st {
  bool blocking = true;                    // ordered with the legacy stream (not cudaStreamNonBlocking)
  std::deque<std::function<void()>> pending;  // enqueued, not run yet
  std::uint64_t queued = 0, ran = 0;          // tickets: work n is the n-th enqueued (from 1)
  bool capturing = false;
  std::thread::id by;                         // the thread capturing
  bool invalidated = false;                   // a call the capture forbids was made during it
  std::vector<std::function<void()>> nodes;   // what the capture kept, in order
  std::vector<cudaEvent_t> marks;             // events the capture records (External)
};
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
  std::vector<cudaEvent_t> marks;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
  std::vector<cudaEvent_t> marks;
};
struct CUevent_st {
  bool timing = true;
  bool recorded = false;   // reached, at `at`
  Clock::time_point at;
  cudaStream_t stream = nullptr;  // where its last record waits to be reached, and as what ticket
  std::uint64_t ticket = 0;
};

namespace {

constexpr std::align_val_t kAlign{256};  // cudaMalloc's alignment

std::mutex state;  // the registries below; launches themselves are serialized by simt.cpp
std::map<const void*, std::size_t> device_allocations, host_allocations;
std::size_t device_held = 0, host_held = 0;
std::vector<cudaStream_t> capturing_streams;  // at most a few: linear search

// The streams' queues, and the work they run: one order for all threads (work may flush others).
std::recursive_mutex order;
std::vector<cudaStream_t> streams;  // alive

// The stream this thread captures, if any.
cudaStream_t captured_here() {
  for (cudaStream_t s : capturing_streams)
    if (s->by == std::this_thread::get_id()) return s;
  return nullptr;
}

// A call CUDA refuses while this thread captures (cudaStreamCaptureModeThreadLocal: it could
// synchronize or allocate): the capture is invalidated and the call fails, as on the GPU.
cudaError_t forbidden_while_capturing(cudaError_t e = cudaErrorStreamCaptureUnsupported) {
  const std::lock_guard lock(state);
  cudaStream_t s = captured_here();
  if (!s) return cudaSuccess;
  s->invalidated = true;
  return e;
}

// Runs `s`'s work up to ticket `upto` (all of it by default).
void flush(cudaStream_t s, std::uint64_t upto = UINT64_MAX) {
  const std::lock_guard lock(order);
  while (s->ran < upto && !s->pending.empty()) {
    std::function<void()> work = std::move(s->pending.front());
    s->pending.pop_front();
    ++s->ran;
    work();  // may flush other streams (a wait), never this one past where it is
  }
}

void flush_all(bool blocking_only) {
  const std::lock_guard lock(order);
  for (std::size_t i = 0; i < streams.size(); ++i)  // by index: work may not add streams, but stay safe
    if (!blocking_only || streams[i]->blocking) flush(streams[i]);
}

// Whether [p, p + n) lies in one cudaHostAlloc allocation.
bool pinned(const void* p, std::size_t n) {
  const std::lock_guard lock(state);
  auto it = host_allocations.upper_bound(p);
  if (it == host_allocations.begin()) return false;
  --it;
  const auto* base = static_cast<const std::byte*>(it->first);
  return static_cast<const std::byte*>(p) >= base && static_cast<const std::byte*>(p) + n <= base + it->second;
}

void reached(cudaEvent_t e) {
  e->recorded = true;
  e->at = Clock::now();
}

}  // namespace

void simt::detail::enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream && stream->capturing) {
    if (stream->by != std::this_thread::get_id()) {
      stream->invalidated = true;  // another thread's work on a stream this one captures
      fail_launch(cudaErrorStreamCaptureInvalidated);
      return;
    }
    stream->nodes.push_back(std::move(work));
    return;
  }
  const std::lock_guard lock(order);
  if (!stream) {  // the legacy stream: after the blocking streams' work, at once
    flush_all(/*blocking_only=*/true);
    work();
    return;
  }
  stream->pending.push_back(std::move(work));
  ++stream->queued;
}

std::size_t simt::device_bytes_held() {
  const std::lock_guard lock(state);
  return device_held + host_held;
}

// ---- Memory. Device memory is host memory, at most simt::kDeviceMemory of it.
cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  *p = nullptr;
  if (const cudaError_t e = forbidden_while_capturing()) return e;
  if (bytes == 0) return cudaSuccess;
  {
    const std::lock_guard lock(state);
    if (bytes > simt::kDeviceMemory - device_held) return cudaErrorMemoryAllocation;
    device_held += bytes;
  }
  *p = ::operator new(bytes, kAlign, std::nothrow);
  const std::lock_guard lock(state);
  if (!*p) {
    device_held -= bytes;
    return cudaErrorMemoryAllocation;
  }
  device_allocations[*p] = bytes;
  std::memset(*p, 0xff, bytes);  // device memory starts as garbage: NaNs, so that a read before a write shows
  return cudaSuccess;
}

namespace {

// cudaFree and cudaFreeHost: they wait for the device, as CUDA's do (whatever is queued may still use
// the memory), and free only what `allocations` holds.
cudaError_t release(std::map<const void*, std::size_t>& allocations, std::size_t& held, void* p) {
  if (const cudaError_t e = forbidden_while_capturing()) return e;
  if (!p) return cudaSuccess;
  flush_all(/*blocking_only=*/false);
  {
    const std::lock_guard lock(state);
    const auto it = allocations.find(p);
    if (it == allocations.end()) return cudaErrorInvalidValue;  // not this allocator's
    held -= it->second;
    allocations.erase(it);
  }
  ::operator delete(p, kAlign);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaFree(void* p) { return release(device_allocations, device_held, p); }
cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned) {
  *p = nullptr;
  if (const cudaError_t e = forbidden_while_capturing()) return e;
  if (bytes == 0) return cudaSuccess;
  *p = ::operator new(bytes, kAlign, std::nothrow);
  if (!*p) return cudaErrorMemoryAllocation;
  const std::lock_guard lock(state);
  host_allocations[*p] = bytes;
  host_held += bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) { return release(host_allocations, host_held, p); }
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  const std::lock_guard lock(state);
  *total = simt::kDeviceMemory;
  *free = simt::kDeviceMemory - device_held;
  return cudaSuccess;
}

// ---- Copies and sets: on a capturing stream, nodes that read their source when the graph runs.
// The synchronous forms are the legacy stream's, which runs at once (and refuses a capture's thread).
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!stream)
    if (const cudaError_t e = forbidden_while_capturing(cudaErrorStreamCaptureImplicit)) return e;
  if (!bytes) return cudaPeekAtLastError();
  const bool from_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
  const bool to_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost;
  if (stream && !stream->capturing) {
    // Into pageable memory: CUDA returns when the copy is done, so the stream's work before it runs now.
    if (to_host && !pinned(dst, bytes)) {
      flush(stream);
      std::memmove(dst, src, bytes);
      return cudaPeekAtLastError();
    }
    // From pageable memory: staged as the call is made (the caller may change it right after).
    if (from_host && !pinned(src, bytes)) {
      auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src), static_cast<const std::byte*>(src) + bytes);
      simt::detail::enqueue(stream, [=] { std::memcpy(dst, staged->data(), bytes); });
      return cudaPeekAtLastError();
    }
  }
  simt::detail::enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  return cudaPeekAtLastError();
}
cudaError_t cudaMemset(void* p, int value, std::size_t bytes) { return cudaMemsetAsync(p, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t stream) {
  if (!stream)
    if (const cudaError_t e = forbidden_while_capturing(cudaErrorStreamCaptureImplicit)) return e;
  if (bytes) simt::detail::enqueue(stream, [=] { std::memset(p, value, bytes); });
  return cudaPeekAtLastError();
}

// ---- Streams.
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  *stream = new CUstream_st;
  (*stream)->blocking = !(flags & cudaStreamNonBlocking);
  const std::lock_guard lock(order);
  streams.push_back(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return cudaErrorInvalidResourceHandle;
  if (stream->capturing) return cudaErrorStreamCaptureUnsupported;
  const std::lock_guard lock(order);
  flush(stream);  // its work still runs, as CUDA's does after the call returns
  std::erase(streams, stream);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream && stream->capturing) {
    stream->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (stream) flush(stream);
  else flush_all(/*blocking_only=*/true);
  return cudaPeekAtLastError();
}
cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = forbidden_while_capturing()) return e;
  flush_all(/*blocking_only=*/false);
  return cudaPeekAtLastError();
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }

// ---- Capture and graphs.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (!stream) return cudaErrorStreamCaptureUnsupported;  // the legacy stream cannot be captured
  const std::lock_guard lock(state);
  if (stream->capturing) return cudaErrorInvalidValue;
  stream->capturing = true;
  stream->by = std::this_thread::get_id();
  stream->invalidated = false;
  stream->nodes.clear();
  stream->marks.clear();
  capturing_streams.push_back(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  const std::lock_guard lock(state);
  if (!stream || !stream->capturing) return cudaErrorInvalidValue;
  stream->capturing = false;
  std::erase(capturing_streams, stream);
  if (stream->invalidated) {
    stream->nodes.clear();
    stream->marks.clear();
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = new CUgraph_st{std::move(stream->nodes), std::move(stream->marks)};
  stream->nodes.clear();
  stream->marks.clear();
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  *status = !stream || !stream->capturing ? cudaStreamCaptureStatusNone
            : stream->invalidated         ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->nodes, graph->marks};
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return cudaSuccess;
  // A launched graph may still be queued: it runs first, as CUDA lets it finish.
  flush_all(/*blocking_only=*/false);
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return cudaErrorInvalidResourceHandle;
  const std::lock_guard lock(order);
  simt::detail::enqueue(stream, [exec] {
    for (const auto& node : exec->nodes) node();
  });
  // The events the graph records are reached when this launch is.
  if (stream && !stream->capturing)
    for (cudaEvent_t e : exec->marks) {
      e->stream = stream;
      e->ticket = stream->queued;
    }
  return cudaPeekAtLastError();
}

// ---- Events.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new CUevent_st;
  (*event)->timing = !(flags & cudaEventDisableTiming);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  const std::lock_guard lock(order);
  // Its record may be queued still (it holds the event): run up to it first.
  if (event->stream && std::find(streams.begin(), streams.end(), event->stream) != streams.end()) flush(event->stream, event->ticket);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned flags) {
  if (!event) return cudaErrorInvalidResourceHandle;
  const bool capturing = stream && stream->capturing;
  // Outside a capture External is invalid; inside one, only an External record is a node (the others
  // order the capture's nodes, which run in order here anyway).
  if ((flags & cudaEventRecordExternal) && !capturing) return cudaErrorInvalidValue;
  if (capturing) {
    if (!(flags & cudaEventRecordExternal)) return cudaSuccess;
    stream->marks.push_back(event);
    simt::detail::enqueue(stream, [event] { reached(event); });
    return cudaSuccess;
  }
  const std::lock_guard lock(order);
  event->recorded = false;
  simt::detail::enqueue(stream, [event] { reached(event); });
  event->stream = stream;
  event->ticket = stream ? stream->queued : 0;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) { return cudaEventRecordWithFlags(event, stream, cudaEventRecordDefault); }
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  if (const cudaError_t e = forbidden_while_capturing()) return e;
  const std::lock_guard lock(order);
  if (!event->stream || event->stream->ran >= event->ticket) return cudaSuccess;
  flush(event->stream, event->ticket);  // not yet when asked; by the next time
  return cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  if (const cudaError_t e = forbidden_while_capturing()) return e;
  if (event->stream) flush(event->stream, event->ticket);
  return cudaPeekAtLastError();
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end || !start->timing || !end->timing) return cudaErrorInvalidResourceHandle;
  const std::lock_guard lock(order);
  for (cudaEvent_t e : {start, end})
    if (e->stream && e->stream->ran < e->ticket) return cudaErrorNotReady;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
// What `stream` enqueues after this runs after the event's work: it flushes the event's stream up to it.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!event) return cudaErrorInvalidResourceHandle;
  if (stream && stream->capturing) return cudaSuccess;  // inside a capture: its own order, which is one order here
  const std::lock_guard lock(order);
  if (cudaStream_t from = event->stream; from && from != stream) {
    const std::uint64_t ticket = event->ticket;
    simt::detail::enqueue(stream, [from, ticket] {
      if (std::find(streams.begin(), streams.end(), from) != streams.end()) flush(from, ticket);
    });
  }
  return cudaSuccess;
}

// ---- The device.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  *prop = {};
  std::strncpy(prop->name, "simt (the CUDA kernels on the CPU, as on an H100)", sizeof prop->name - 1);
  prop->totalGlobalMem = simt::kDeviceMemory;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = simt::kMultiprocessors;
  prop->l2CacheSize = simt::kL2Bytes;
  return cudaSuccess;
}
