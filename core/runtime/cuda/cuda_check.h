#pragma once
// Every CUDA runtime, cuBLAS, driver and kernel-launch call goes through MOSAIC_CUDA_CHECK, which
// throws DeviceError naming the statement, its file and line, and the library's own message.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

namespace mosaic::cuda {

[[noreturn]] void fail(const char* library, int code, const char* message, const char* statement, const char* file, int line);

inline void check(cudaError_t e, const char* statement, const char* file, int line) {
  if (e != cudaSuccess) {
    // The runtime also keeps a failed call's error as the thread's last error, which the next kernel
    // launch's check reads: without this, one out-of-memory would fail the next request's first launch too.
    (void)cudaGetLastError();
    fail("CUDA runtime", static_cast<int>(e), cudaGetErrorString(e), statement, file, line);
  }
}
// Kernel launchers in kernels/ return the launch's cudaError_t as an int.
inline void check(int e, const char* statement, const char* file, int line) { check(static_cast<cudaError_t>(e), statement, file, line); }
void check(cublasStatus_t s, const char* statement, const char* file, int line);
void check(CUresult r, const char* statement, const char* file, int line);

}  // namespace mosaic::cuda

#define MOSAIC_CUDA_CHECK(statement) ::mosaic::cuda::check((statement), #statement, __FILE__, __LINE__)
