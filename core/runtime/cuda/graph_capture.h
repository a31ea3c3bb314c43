#pragma once
// Work enqueued on a stream, captured as an executable CUDA graph: what the decode graphs and the
// kernel timer share.
#include "runtime/cuda/cuda_check.h"

namespace mosaic::cuda {

// Captures what `enqueue()` puts on `stream` and instantiates it; the caller destroys the result with
// cudaGraphExecDestroy. A throw from `enqueue` ends the capture, discards it and passes on.
template <class F>
cudaGraphExec_t capture_graph(cudaStream_t stream, F&& enqueue) {
  cudaGraph_t graph = nullptr;
  MOSAIC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  MOSAIC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MOSAIC_CUDA_CHECK(made);
  return exec;
}

}  // namespace mosaic::cuda
