#pragma once
// cuBLAS, opened when the CUDA backend first needs it (dlopen) instead of linked: mosaic and
// mosaic-cli then start on machines without the CUDA toolkit, and the Debian package depends only
// on Debian's libraries (Debian has no cuBLAS 13). Call through cublas().
#include <cublas_v2.h>

#include <optional>
#include <string>

namespace mosaic::cuda {

struct CublasLibrary {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  // The library's own cublasGemmEx (the header adds a C++ overload taking cudaDataType as the compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*, cudaDataType,
                            int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Opened once. Why it cannot be used (the loader's words and what to install); nullopt when it can.
std::optional<std::string> cublas_unavailable();
// Throws DeviceError naming the library file looked for and what to install.
const CublasLibrary& cublas();

}  // namespace mosaic::cuda
