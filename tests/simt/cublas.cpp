// simt's cuBLAS: cublasGemmEx on the host, in order on the handle's stream (a node of its graph while
// the stream is captured). Column-major as cuBLAS is; each product summed in fp32, in order over k
// (cuBLAS's order differs, so results agree to fp32 rounding, not bit for bit).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <vector>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float load(const void* p, cudaDataType t, std::size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
  }
  return 0;
}

void store(void* p, cudaDataType t, std::size_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = v; return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); return;
    case CUDA_R_16F: return;  // refused before: no C of half precision here
  }
}

bool known(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!known(Atype) || !known(Btype) || !known(Ctype) || Ctype == CUDA_R_16F || computeType != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  // cuBLAS's checks: sizes not negative, leading dimensions at least the rows stored.
  const int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  // alpha and beta are read now (host pointers), as cuBLAS's default pointer mode reads them.
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  simt::detail::enqueue(handle->stream, [=] {
    // op(A) by rows and op(B) by columns in fp32, so that each product is a contiguous dot.
    const auto K = static_cast<std::size_t>(k);
    std::vector<float> a_rows(std::size_t(m) * K), b_cols(std::size_t(n) * K);
    for (std::size_t i = 0; i < std::size_t(m); ++i)
      for (std::size_t p = 0; p < K; ++p) a_rows[i * K + p] = load(A, Atype, transa == CUBLAS_OP_N ? i + p * std::size_t(lda) : p + i * std::size_t(lda));
    for (std::size_t j = 0; j < std::size_t(n); ++j)
      for (std::size_t p = 0; p < K; ++p) b_cols[j * K + p] = load(B, Btype, transb == CUBLAS_OP_N ? p + j * std::size_t(ldb) : j + p * std::size_t(ldb));
    for (std::size_t j = 0; j < std::size_t(n); ++j)
      for (std::size_t i = 0; i < std::size_t(m); ++i) {
        float sum = 0;
        for (std::size_t p = 0; p < K; ++p) sum += a_rows[i * K + p] * b_cols[j * K + p];
        const std::size_t at = i + j * std::size_t(ldc);
        // beta 0 does not read C, which may hold garbage (NaNs), as cuBLAS does not.
        store(C, Ctype, at, a * sum + (b == 0.0f ? 0.0f : b * load(C, Ctype, at)));
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
