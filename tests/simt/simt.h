#pragma once
// simt: Mosaic's CUDA kernels run on the CPU, so that their tests run on every machine, CI's included.
//
// The kernel sources are compiled as C++ (tests/simt/rewrite_launches.cmake turns `k<<<g, b, s, st>>>(…)`
// into `::simt::launcher("k", k, g, b, s, st)(…)`), against the headers in tests/simt/include, which stand
// in for cuda_runtime.h, cuda_bf16.h and cuda_fp16.h. A launch runs its blocks one after another; a
// block's threads are fibers, switched only where CUDA makes threads wait for each other
// (__syncthreads and the warp's *_sync collectives). So what is checked is what the kernels compute:
// indexing, bounds (ASan sees every buffer and shared array), the cooperation of lanes and blocks,
// launch configurations and shared-memory limits. A collective some lane never reaches is reported
// as a deadlock and fails the launch, where a GPU would hang or read garbage.
// A thread runs until it waits, so one thread of a block runs ahead of the others (the first, or in
// every other block the last): a missing __syncthreads shows as a wrong result. Not checked: memory ordering (compute-sanitizer's racecheck,
// on the GPU) and speed. A thread spinning on memory another thread of its block writes would never
// yield (no kernel here does). One launch at a time, from any one thread. A launch on a stream other
// than the legacy one waits in that stream's queue until something waits for the stream, and the
// backend's streams, events, graphs, virtual memory and cuBLAS are simt's too (simt/streams.h).
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- Execution spaces and qualifiers: plain C++ here.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static  // one block runs at a time, so a static is the block's shared memory

// ---- Vector types.
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// ---- Runtime API: the part the kernels and their tests call. Device memory is host memory.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
};
typedef enum cudaError cudaError_t;
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaMalloc(void** p, std::size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDevice(int* device);
constexpr unsigned cudaStreamNonBlocking = 1;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);

namespace simt {

// The device simt stands for: an H100's 132 multiprocessors and 227 KiB of opt-in shared memory
// per block, so that work split by multiprocessor count splits as it would there.
constexpr int kMultiprocessors = 132;
constexpr int kSharedDefault = 48 * 1024;
constexpr int kSharedOptIn = 227 * 1024;
constexpr int kL2Bytes = 50 * 1024 * 1024;
constexpr std::size_t kDeviceMemory = std::size_t(80) << 30;  // what cudaMalloc hands out in all, at most

namespace detail {

struct Thread;
unsigned lane();

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);
cudaError_t launch_error(const void* kernel, dim3 grid, dim3 block, std::size_t shared);  // what the GPU refuses at launch
// Work for `stream`: queued behind what is on it, done now on the legacy stream, or kept as a node of
// the graph the stream is capturing (streams.cpp).
void enqueue(cudaStream_t stream, std::function<void()> work);
void fail_launch(cudaError_t e);  // kept as the last error, as a failed launch's is
cudaError_t run(const char* name, const void* kernel, dim3 grid, dim3 block, std::size_t shared, void (*body)(void*), void* context);
void* dynamic_shared();

// Warp collectives over the lanes of `mask` (all of which must call them): each lane gives a
// 64-bit word and gets the words of all lanes, after every lane of the mask has given its own.
const std::uint64_t* exchange(unsigned mask, std::uint64_t mine);
// A use of the API that a GPU leaves undefined (a misaligned tensor-core tile, say): reported with the
// thread it happened in, and the launch fails with cudaErrorMisalignedAddress.
void misuse(const char* what);
void sync_block();
int sync_block_or(int predicate);

template <class T>
std::uint64_t to_word(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  std::uint64_t w = 0;
  __builtin_memcpy(&w, &v, sizeof v);
  return w;
}
template <class T>
T from_word(std::uint64_t w) {
  T v;
  __builtin_memcpy(&v, &w, sizeof v);
  return v;
}

}  // namespace detail

// `kernel<<<grid, block, shared, stream>>>(args…)` as rewrite_launches.cmake writes it, named for reports. Each thread
// gets its own copy of the arguments, converted to the kernel's parameter types as CUDA converts them.
// The arguments are converted when the launch is made, so a launch a graph captured (simt/streams.h)
// replays with the values it was captured with, as on the GPU.
template <class... P>
auto launcher(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared = 0, cudaStream_t stream = nullptr) {
  return [=](auto&&... args) {
    // A launch the GPU would refuse fails when it is made, not when its stream gets to it.
    if (const cudaError_t e = detail::launch_error(reinterpret_cast<const void*>(kernel), grid, block, shared)) {
      detail::fail_launch(e);
      return;
    }
    using Params = std::tuple<std::decay_t<P>...>;
    auto params = std::make_shared<const Params>(static_cast<P>(args)...);
    detail::enqueue(stream, [=] {
      struct Call {
        void (*kernel)(P...);
        const Params* params;
      } call{kernel, params.get()};
      detail::run(name, reinterpret_cast<const void*>(kernel), grid, block, shared,
                  [](void* c) {
                    auto* call = static_cast<Call*>(c);
                    std::apply(call->kernel, *call->params);
                  },
                  &call);
    });
  };
}

// `extern __shared__ T name[];`: the launch's dynamic shared memory.
template <class T>
T* dynamic_shared() {
  return static_cast<T*>(detail::dynamic_shared());
}

}  // namespace simt

// cudaLaunchKernelEx with its configuration; the attributes (a programmatic launch's) change nothing
// here: a launch runs whole before the next starts.
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 6 };
union cudaLaunchAttributeValue {
  int programmaticStreamSerializationAllowed;
  char pad[64];
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  std::size_t dynamicSmemBytes = 0;
  cudaStream_t stream = nullptr;
  cudaLaunchAttribute* attrs = nullptr;
  unsigned numAttrs = 0;
};
template <class... P, class... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A&&... args) {
  simt::launcher("a kernel launched by cudaLaunchKernelEx", kernel, config->gridDim, config->blockDim, config->dynamicSmemBytes,
                 config->stream)(std::forward<A>(args)...);
  return cudaPeekAtLastError();
}

// A kernel as compiled: for sm_90 (the H100 simt stands for), so programmatic launches are possible.
struct cudaFuncAttributes {
  int ptxVersion = 90, binaryVersion = 90;
};
template <class K>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, K*) {
  *attributes = {};
  return cudaSuccess;
}

template <class K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return simt::detail::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
}

// ---- Built-in variables: globals, as one thread runs at a time (threadIdx is set at each switch).
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

// ---- Synchronization and warp collectives.
inline void __syncthreads() { simt::detail::sync_block(); }
inline int __syncthreads_or(int predicate) { return simt::detail::sync_block_or(predicate); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { simt::detail::exchange(mask, 0); }
inline void __threadfence() {}  // one block at a time: every write is seen by the blocks after it
inline void __threadfence_block() {}

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  const std::uint64_t* w = simt::detail::exchange(mask, predicate != 0);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && w[l]) bits |= 1u << l;
  return bits;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }

template <class T>
unsigned __match_any_sync(unsigned mask, T value) {
  const std::uint64_t mine = simt::detail::to_word(value);
  const std::uint64_t* w = simt::detail::exchange(mask, mine);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && w[l] == mine) bits |= 1u << l;
  return bits;
}

// Shuffles: a lane whose source falls outside its segment of `width` lanes keeps its own value.
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const std::uint64_t* w = simt::detail::exchange(mask, simt::detail::to_word(v));
  const unsigned lane = simt::detail::lane(), base = lane & ~static_cast<unsigned>(width - 1);
  return simt::detail::from_word<T>(w[base + (static_cast<unsigned>(src) & static_cast<unsigned>(width - 1))]);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const std::uint64_t* w = simt::detail::exchange(mask, simt::detail::to_word(v));
  const unsigned lane = simt::detail::lane(), base = lane & ~static_cast<unsigned>(width - 1);
  const unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  return simt::detail::from_word<T>(w[src >= base && src < base + static_cast<unsigned>(width) ? src : lane]);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const std::uint64_t* w = simt::detail::exchange(mask, simt::detail::to_word(v));
  const unsigned lane = simt::detail::lane(), base = lane & ~static_cast<unsigned>(width - 1);
  return simt::detail::from_word<T>(w[lane >= base + delta ? lane - delta : lane]);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const std::uint64_t* w = simt::detail::exchange(mask, simt::detail::to_word(v));
  const unsigned lane = simt::detail::lane(), base = lane & ~static_cast<unsigned>(width - 1);
  return simt::detail::from_word<T>(w[lane + delta < base + static_cast<unsigned>(width) ? lane + delta : lane]);
}

// ---- Atomics: one thread runs at a time, so a plain update is atomic.
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

// ---- Loads through the caches: plain loads.
template <class T>
T __ldg(const T* p) {
  return *p;
}
template <class T>
T __ldcg(const T* p) {
  return *p;
}
template <class T>
T __ldcs(const T* p) {
  return *p;
}

// ---- Arithmetic intrinsics, at full precision (the GPU's fast ones differ in the last bits).
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __uint_as_float(unsigned v) { return std::bit_cast<float>(v); }
inline unsigned __float_as_uint(float v) { return std::bit_cast<unsigned>(v); }
inline float __int_as_float(int v) { return std::bit_cast<float>(v); }
inline int __float_as_int(float v) { return std::bit_cast<int>(v); }
inline int __popc(unsigned v) { return std::popcount(v); }
inline int __popcll(unsigned long long v) { return std::popcount(v); }
inline int __ffs(int v) { return v == 0 ? 0 : std::countr_zero(static_cast<unsigned>(v)) + 1; }
inline int __clz(int v) { return std::countl_zero(static_cast<unsigned>(v)); }

// CUDA's classification functions are global.
using std::isfinite;
using std::isinf;
using std::isnan;

// CUDA's min and max of two numbers, for the argument pairs the kernels pass.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a < b ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a < b ? b : a; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a < b ? b : a; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }

// Streams, events, graphs, pinned memory and the device's properties: what the CUDA backend calls.
#include "simt/streams.h"
