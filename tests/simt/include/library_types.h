#pragma once
// Stands in for the CUDA toolkit's library_types.h in simt builds: the element types cuBLAS names.
typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
} cudaDataType;
