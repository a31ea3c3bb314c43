#pragma once
// Where a decode step's time goes: each kernel of a batch-1 step, timed alone at a model's shapes.
// A step replayed from a CUDA graph costs more than its kernels' bytes at the read bandwidth; this
// says which kernels are far from their own floor, and (against the step's measured time) how much
// is spent outside them: the host's work on the step and its copies. Each launch's time includes
// its gap to the next, as in a graph. Asked without CUDA headers; a build without nvcc
// answers with DeviceError.
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace mosaic::cuda {

struct KernelTime {
  std::string name;    // "q projection", "experts: gate and up", …
  int per_token = 0;   // launches in one decode token at batch 1
  double seconds = 0;  // one launch
  double bytes = 0;    // what one launch has to read: weights, the attention's cache rows
};

// The kernels of a batch-1 decode step of `spec` with every routed expert resident (the device-routed
// path the decode graphs take): attention block, router, top-k, reroute, grouped experts, combine,
// and the embedding and output head. Dense MLP layers, shared experts and q/k norms are not timed.
// Each kernel runs as a graph of repeated launches over copies of its weights larger than the L2
// together, so no launch reads them from cache; best of several replays. `context`: the positions
// the attention reads. `fused`: the kernels as the backend launches them by default (q, k and v in
// one launch, rotary with the cache write, top-k with the reroute, the down projection with the
// combine, the attention split over positions), else one by one as under MOSAIC_CUDA_FUSED=0.
std::vector<KernelTime> time_decode_kernels(const ModelSpec& spec, int context, bool fused = true);

// One batch-1 decode attention of `spec` over `context` positions (its keys and values read from
// memory, not the L2), launched as a graph captured for kGraphPositions (or `context` where longer)
// launches it: seconds per launch split over positions (kernels::AttentionSplit) and in one block per head.
struct AttentionTime {
  double split = 0, one_block = 0;
};
AttentionTime time_decode_attention(const ModelSpec& spec, int context);

}  // namespace mosaic::cuda
