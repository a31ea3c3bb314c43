// runtime/cuda/cublas_library.h on simt: simt's own cuBLAS (tests/simt/cublas.cpp), linked, not opened.
#include "runtime/cuda/cublas_library.h"

namespace mosaic::cuda {

std::optional<std::string> cublas_unavailable() { return std::nullopt; }

const CublasLibrary& cublas() {
  static const CublasLibrary lib{&cublasCreate, &cublasDestroy, &cublasSetStream, &cublasGemmEx, &cublasGetStatusString};
  return lib;
}

}  // namespace mosaic::cuda
