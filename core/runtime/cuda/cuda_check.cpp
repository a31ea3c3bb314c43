#include "runtime/cuda/cuda_check.h"

#include <string>

#include "common/error.h"
#include "runtime/cuda/cublas_library.h"

namespace mosaic::cuda {

void fail(const char* library, int code, const char* message, const char* statement, const char* file, int line) {
  std::string where = file;
  if (const auto slash = where.rfind("core/"); slash != std::string::npos) where = where.substr(slash);
  throw DeviceError("device cuda", std::string(statement) + " at " + where + ":" + std::to_string(line),
                    std::string(library) + " error " + std::to_string(code) + ": " + (message ? message : "?"),
                    code == cudaErrorMemoryAllocation ? "lower the budget or free the GPU" : "");
}

void check(cublasStatus_t s, const char* statement, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS", static_cast<int>(s), cublas().status_string(s), statement, file, line);
}

void check(CUresult r, const char* statement, const char* file, int line) {
  if (r != CUDA_SUCCESS) fail("CUDA driver", static_cast<int>(r), "see cuda.h's CUresult", statement, file, line);
}

}  // namespace mosaic::cuda
