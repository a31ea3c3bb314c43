#pragma once
// Where a decode step's time goes: each kernel of a batch-1 step, timed alone at a model's shapes.
// A step replayed from a CUDA graph costs more than its kernels' bytes at the read bandwidth; this
// says which kernels are far from their own floor, and (against the step's measured time) how much
// is spent outside them: the host's work on the step and its copies. Each launch's time includes
// its gap to the next, as in a graph. Asked without CUDA headers; a build without nvcc
// answers with DeviceError.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model_spec.h"

namespace mosaic::cuda {

// Launches a timing graph holds (at most 64) and replays of it, the best counting: the defaults
// measure; fewer only exercise the timing, as tst_cuda_backend does on simt (kernels on the CPU).
struct TimingRounds {
  int launches = 64, replays = 5;
};

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
std::vector<KernelTime> time_decode_kernels(const ModelSpec& spec, int context, bool fused = true, TimingRounds rounds = {});

// One batch-1 decode attention of `spec` over `context` positions (its keys and values read from
// memory, not the L2), launched as a graph captured for kGraphPositions (or `context` where longer)
// launches it: seconds per launch split over positions (kernels::AttentionSplit) and in one block per head.
struct AttentionTime {
  double split = 0, one_block = 0;
};
AttentionTime time_decode_attention(const ModelSpec& spec, int context);

// A delta expert's matrix against the dense one it replaces (issue 61 #5; delta_timing.cpp): one
// rows × cols projection over `tokens` rows of x, as bf16 through the dense GEMV (linear_cuda: what a
// slot's projection runs at decode sizes) and as a packed delta (docs/delta-format.md, group 128)
// through each delta kernel (kernels::DeltaKernel), for 4-bit 2:4, 4-bit dense and 2-bit 2:4. Every
// launch reads its own copy of the arrays from memory, as time_decode_kernels' do.
struct DeltaKernelTime {
  int bits = 4;
  bool sparse24 = true;
  int tokens = 1;
  double dense = 0, rows = 0, tiles = 0;  // seconds a launch; tiles 0 where the shape does not fit them
  double dense_bytes = 0, delta_bytes = 0;  // what a launch reads: the bf16 matrix, the packed arrays
};
// tokens: each 1 … 8 (the dense GEMV's most rows); rows, cols: positive, cols a multiple of 4.
std::vector<DeltaKernelTime> time_delta_kernels(std::int64_t rows, std::int64_t cols, std::span<const int> tokens, TimingRounds rounds = {});

}  // namespace mosaic::cuda
