// simt's executor: a launch's blocks one after another, each block's threads as fibers on their own
// stacks, switched cooperatively where CUDA makes threads wait for each other.
#include "simt/simt.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace simt::detail {

struct Thread {
  void* sp = nullptr;  // saved stack pointer while switched out (x86-64)
#if !defined(__x86_64__)
  ucontext_t context;
#endif
  uint3 idx{};
  unsigned lane = 0, warp = 0;
  bool done = false;
  const char* waits_at = nullptr;  // the collective it waits in, for a deadlock's report
  unsigned waits_mask = 0;
  const unsigned* gate_generation = nullptr;  // while it waits: the generation that must pass first,
  unsigned blocked_at = 0;                    // so that the scheduler resumes it only when it can go on
  void* fake_stack = nullptr;  // ASan's, while switched out
};

}  // namespace simt::detail

// The fiber switch (System V x86-64): callee-saved registers, MXCSR and the x87 control word pushed
// on the old stack, popped from the new one. A new fiber's stack is laid out as if it had been
// switched out just before simt_fiber_start, which passes r12 (its Thread) to simt_fiber_main.
extern "C" void simt_fiber_main(simt::detail::Thread* t);
#if defined(__x86_64__)
extern "C" void simt_switch(void** save, void* to);
extern "C" void simt_fiber_start();
asm(R"(
  .text
  .p2align 4
  .globl simt_switch
  .type simt_switch, @function
simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_switch, .-simt_switch
  .globl simt_fiber_start
  .type simt_fiber_start, @function
simt_fiber_start:
  movq %r12, %rdi
  call simt_fiber_main@PLT
  ud2
  .size simt_fiber_start, .-simt_fiber_start
)");
#endif

namespace simt::detail {

Thread* current = nullptr;  // the fiber running

namespace {

#if defined(SIMT_ASAN)
constexpr std::size_t kStackBytes = 512 * 1024;  // ASan's redzones make frames several times larger
#else
constexpr std::size_t kStackBytes = 128 * 1024;
#endif
constexpr std::size_t kGuardBytes = 4096;  // below each stack: an overflow faults instead of corrupting

struct Stack {
  std::byte* base = nullptr;  // lowest usable byte
};

struct Gate {
  unsigned arrived = 0, generation = 0;
  std::uint64_t words[2][32] = {};  // by generation's parity: a lane may be one collective ahead
  int any[2] = {0, 0};              // __syncthreads_or's value, by parity
};

struct Warp {
  unsigned present = 0;  // lanes that exist (a block's last warp may be partial)
  unsigned exited = 0;
  Gate whole;                      // the full mask's, the one most collectives use: no lookup
  std::map<unsigned, Gate> gates;  // one per other mask in use
};

struct Launch {
  const char* kernel = "";
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  void* shared = nullptr;
};

std::mutex launching;  // one launch at a time: __shared__ arrays are statics
std::vector<Stack> stacks;
std::vector<Thread> threads;
std::vector<Warp> warps;
Gate block_gate;
unsigned live = 0;
std::uint64_t progress = 0;  // arrivals, releases and exits: a pass without any is a deadlock
std::uint64_t blocks_run = 0;  // over all launches: which way the next block's threads are taken
void* scheduler_sp = nullptr;
#if !defined(__x86_64__)
ucontext_t scheduler_context;
#endif
Launch launch;
cudaError_t last_error = cudaSuccess;
std::map<const void*, int> max_dynamic_shared;
#if defined(SIMT_ASAN)
const void* scheduler_stack_bottom = nullptr;
std::size_t scheduler_stack_size = 0;
#endif

void fail(cudaError_t e) {
  if (last_error == cudaSuccess) last_error = e;
}

Stack& stack(std::size_t i) {
  while (stacks.size() <= i) {
    void* m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "simt: no memory for a fiber stack\n");
      std::abort();
    }
    mprotect(m, kGuardBytes, PROT_NONE);
    stacks.push_back({static_cast<std::byte*>(m) + kGuardBytes});
  }
  return stacks[i];
}

// Switches from the scheduler into `t`, until it yields or ends.
void resume(Thread& t, std::size_t i) {
  current = &t;
  threadIdx = t.idx;
#if defined(SIMT_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack(i).base, kStackBytes);
#else
  (void)i;
#endif
#if defined(__x86_64__)
  simt_switch(&scheduler_sp, t.sp);
#else
  swapcontext(&scheduler_context, &t.context);
#endif
#if defined(SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  current = nullptr;
}

// From the running fiber back to the scheduler; `ending`: it will not be resumed.
void to_scheduler(bool ending) {
  Thread& t = *current;
#if defined(SIMT_ASAN)
  __sanitizer_start_switch_fiber(ending ? nullptr : &t.fake_stack, scheduler_stack_bottom, scheduler_stack_size);
#else
  (void)ending;
#endif
#if defined(__x86_64__)
  simt_switch(&t.sp, scheduler_sp);
#else
  swapcontext(&t.context, &scheduler_context);
#endif
#if defined(SIMT_ASAN)
  __sanitizer_finish_switch_fiber(t.fake_stack, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
}

void start(Thread& t, std::size_t i) {
  std::byte* base = stack(i).base;
#if defined(SIMT_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(base, kStackBytes);  // an abandoned fiber's frames left redzones here
#endif
#if defined(__x86_64__)
  // [csr][r15][r14][r13][r12][rbx][rbp][return to simt_fiber_start], the return slot 8 below a
  // 16-byte boundary so that simt_fiber_start's call finds the stack as the ABI wants it.
  auto* top = reinterpret_cast<std::uint64_t*>(base + kStackBytes - 16);
  std::uint64_t* slot = top - 1;
  *slot = reinterpret_cast<std::uint64_t>(&simt_fiber_start);
  slot -= 6;
  std::memset(slot, 0, 6 * sizeof(std::uint64_t));
  slot[3] = reinterpret_cast<std::uint64_t>(&t);  // r12
  --slot;
  const std::uint32_t control[2] = {0x1f80u, 0x037fu};  // MXCSR and the x87 control word: the ABI's defaults
  std::memcpy(slot, control, sizeof control);
  t.sp = slot;
#else
  getcontext(&t.context);
  t.context.uc_stack.ss_sp = base;
  t.context.uc_stack.ss_size = kStackBytes;
  t.context.uc_link = nullptr;
  makecontext(&t.context, [] { simt_fiber_main(current); }, 0);  // resume() set `current` to it
#endif
}

void release(Gate& g) {
  g.arrived = 0;
  ++g.generation;
  g.any[g.generation & 1u] = 0;  // the slot two collectives on: every lane has read it
  ++progress;
}

// Waits in the running fiber until `g` passes `generation`.
void wait(Gate& g, unsigned generation, const char* what, unsigned mask) {
  Thread& t = *current;
  t.waits_at = what;
  t.waits_mask = mask;
  t.gate_generation = &g.generation;
  t.blocked_at = generation;
  while (g.generation == generation) to_scheduler(false);
  t.waits_at = nullptr;
  t.gate_generation = nullptr;
}

std::string where(const Thread& t) {
  char b[96];
  std::snprintf(b, sizeof b, "thread (%u,%u,%u) lane %u of warp %u", t.idx.x, t.idx.y, t.idx.z, t.lane, t.warp);
  return b;
}

void report_deadlock() {
  std::fprintf(stderr, "simt: %s deadlocked in block (%u,%u,%u) of (%u,%u,%u) x (%u,%u,%u):\n", launch.kernel, blockIdx.x,
               blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y, blockDim.z);
  int shown = 0;
  for (const Thread& t : threads) {
    if (t.done || !t.waits_at) continue;
    if (++shown > 8) {
      std::fprintf(stderr, "  ...\n");
      break;
    }
    std::fprintf(stderr, "  %s waits at %s (mask 0x%08x; lanes exited 0x%08x)\n", where(t).c_str(), t.waits_at, t.waits_mask,
                 warps[t.warp].exited);
  }
}

}  // namespace

unsigned lane() { return current->lane; }
void misuse(const char* what) {
  std::fprintf(stderr, "simt: %s: %s %s\n", launch.kernel, where(*current).c_str(), what);
  fail(cudaErrorMisalignedAddress);
}
void* dynamic_shared() { return launch.shared; }

const std::uint64_t* exchange(unsigned mask, std::uint64_t mine) {
  Thread& t = *current;
  Warp& w = warps[t.warp];
  if (!(mask >> t.lane & 1u)) {
    std::fprintf(stderr, "simt: %s: %s calls a warp collective whose mask 0x%08x leaves it out\n", launch.kernel, where(t).c_str(), mask);
    std::abort();
  }
  Gate& g = mask == 0xffffffffu ? w.whole : w.gates[mask];
  const unsigned generation = g.generation;
  g.words[generation & 1u][t.lane] = mine;
  ++progress;
  if (++g.arrived == static_cast<unsigned>(std::popcount(mask & w.present))) release(g);
  else wait(g, generation, "a warp collective", mask);
  return g.words[generation & 1u];
}

int sync_block_or(int predicate) {
  const unsigned generation = block_gate.generation;
  block_gate.any[generation & 1u] |= predicate != 0;
  ++progress;
  if (++block_gate.arrived == live) release(block_gate);
  else wait(block_gate, generation, "__syncthreads", 0);
  return block_gate.any[generation & 1u];
}

void sync_block() { sync_block_or(0); }

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || bytes > kSharedOptIn) return cudaErrorInvalidValue;
  max_dynamic_shared[kernel] = bytes;
  return cudaSuccess;
}

cudaError_t launch_error(const void* kernel, dim3 grid, dim3 block, std::size_t shared) {
  std::lock_guard lock(launching);
  const std::uint64_t n = std::uint64_t(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || n == 0 || n > 1024 || block.z > 64 || grid.y > 65535 || grid.z > 65535)
    return cudaErrorInvalidConfiguration;
  const auto allowed = max_dynamic_shared.count(kernel) ? max_dynamic_shared[kernel] : kSharedDefault;
  if (shared > static_cast<std::size_t>(std::max(allowed, kSharedDefault))) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t run(const char* name, const void* kernel, dim3 grid, dim3 block, std::size_t shared, void (*body)(void*), void* context) {
  if (const cudaError_t e = launch_error(kernel, grid, block, shared)) {
    fail(e);
    return e;
  }
  std::lock_guard lock(launching);
  const std::uint64_t n = std::uint64_t(block.x) * block.y * block.z;
  // Shared memory starts as garbage on the GPU: here as NaNs, so that a read before a write shows.
  void* smem = shared ? ::operator new(shared) : nullptr;
  if (smem) std::memset(smem, 0xff, shared);
  launch = {name, body, context, smem};
  gridDim = grid;
  blockDim = block;
  threads.assign(n, Thread{});
  warps.assign((n + 31) / 32, Warp{});
  for (std::size_t i = 0; i < n; ++i) {
    Thread& t = threads[i];
    t.idx = {static_cast<unsigned>(i % block.x), static_cast<unsigned>(i / block.x % block.y), static_cast<unsigned>(i / (std::uint64_t(block.x) * block.y))};
    t.lane = static_cast<unsigned>(i % 32);
    t.warp = static_cast<unsigned>(i / 32);
    warps[t.warp].present |= 1u << t.lane;
  }
  cudaError_t result = cudaSuccess;
  for (unsigned z = 0; z < grid.z && result == cudaSuccess; ++z)
    for (unsigned y = 0; y < grid.y && result == cudaSuccess; ++y)
      for (unsigned x = 0; x < grid.x && result == cudaSuccess; ++x) {
        blockIdx = {x, y, z};
        for (std::size_t i = 0; i < n; ++i) {
          threads[i].done = false;
          threads[i].waits_at = nullptr;
          threads[i].gate_generation = nullptr;
          start(threads[i], i);
        }
        for (Warp& w : warps) {
          w.exited = 0;
          w.whole = Gate{};
          w.gates.clear();
        }
        block_gate = Gate{};
        live = static_cast<unsigned>(n);
        // A warp runs as far as it can (to a __syncthreads, its end, or a collective waiting for a
        // lane that cannot come) before the next is taken, as a GPU's warps may run ahead of each
        // other: a read of what another warp writes before a barrier gets NaNs. Within a warp, a
        // lane runs until it waits. Every other block takes its warps and lanes last to first, so
        // that a missing barrier shows whichever side of it runs ahead.
        const bool backwards = blocks_run++ % 2 == 1;
        const std::size_t warp_count = warps.size();
        while (live > 0) {
          const std::uint64_t before = progress;
          for (std::size_t wj = 0; wj < warp_count; ++wj) {
            const std::size_t w = backwards ? warp_count - 1 - wj : wj;
            const std::size_t first = w * 32, count = std::min<std::size_t>(32, n - first);
            for (std::uint64_t warp_before = ~progress; warp_before != progress;) {
              warp_before = progress;
              for (std::size_t j = 0; j < count; ++j) {
                const std::size_t i = first + (backwards ? count - 1 - j : j);
                const Thread& t = threads[i];
                if (!t.done && !(t.gate_generation && *t.gate_generation == t.blocked_at)) resume(threads[i], i);
              }
            }
          }
          if (live > 0 && progress == before) {
            report_deadlock();
            result = cudaErrorLaunchFailure;
            break;
          }
        }
      }
  ::operator delete(smem);
  launch = {};
  if (result != cudaSuccess) fail(result);
  return result;
}

}  // namespace simt::detail

extern "C" void simt_fiber_main(simt::detail::Thread* t) {
  using namespace simt::detail;
#if defined(SIMT_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom, &scheduler_stack_size);
#endif
  launch.body(launch.context);
  t->done = true;
  warps[t->warp].exited |= 1u << t->lane;
  --live;
  ++progress;
  // Threads that have exited count as arrived at __syncthreads, as on the GPU.
  if (block_gate.arrived > 0 && block_gate.arrived == live) release(block_gate);
  to_scheduler(true);
  std::abort();  // never resumed
}

uint3 threadIdx{}, blockIdx{};
dim3 blockDim, gridDim;

// ---- The runtime API: errors and the device's attributes (memory, streams and graphs: streams.cpp).
void simt::detail::fail_launch(cudaError_t e) { fail(e); }

cudaError_t cudaGetLastError() {
  const cudaError_t e = simt::detail::last_error;
  simt::detail::last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return simt::detail::last_error; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure (simt: a deadlock, reported above)";
    case cudaErrorMisalignedAddress: return "misaligned address (simt: reported above)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return "unknown error";
  }
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = simt::kMultiprocessors; return cudaSuccess;
    case cudaDevAttrL2CacheSize: *value = simt::kL2Bytes; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = simt::kSharedOptIn; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}
