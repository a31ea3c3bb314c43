#pragma once
// What a token's draw needs from a row of vocabulary logits, prepared where the logits are: the first
// maximum (greedy's token), the softmax's normaliser at the row's temperature, and the C most
// probable tokens in order. The host's Sampler finishes the draw from these — its seeded generator
// and double arithmetic stay where they were — and reads the whole row only when a draw reaches past
// the C candidates. A step then copies back C keys a row instead of the vocabulary (4 KB, not 128 KB
// at 32k). Raw pointers, no LibTorch.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MOSAIC_HOST_DEVICE __host__ __device__
#else
#define MOSAIC_HOST_DEVICE
#endif

namespace mosaic::kernels {

// A logit's bits as an unsigned integer in the order of the values (−0 as +0: they are equal logits;
// every NaN above +inf, alike on the host and the device, whatever its sign and payload).
// Branch-free: a row's signs are random, and a mispredicted branch per logit tripled the host's sort.
MOSAIC_HOST_DEVICE inline std::uint32_t ordered_bits(float logit) {
  const float canonical = logit + 0.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &canonical, sizeof bits);
  const std::uint32_t flip = (0u - (bits >> 31)) | 0x80000000u;              // negative: all bits; else the sign
  const std::uint32_t nan = 0u - static_cast<std::uint32_t>((bits & 0x7FFFFFFFu) > 0x7F800000u);
  return (bits ^ flip) | nan;
}
// A candidate as one integer that sorts (descending) most probable first, ties to the lower index,
// so that a draw does not depend on how a sort breaks ties: the ordered logit above, the index
// inverted below.
MOSAIC_HOST_DEVICE inline std::uint64_t token_key(float logit, std::uint32_t index) {
  return (std::uint64_t{ordered_bits(logit)} << 32) | (0xFFFFFFFFu - index);
}
MOSAIC_HOST_DEVICE inline std::uint32_t key_index(std::uint64_t key) { return 0xFFFFFFFFu - static_cast<std::uint32_t>(key); }
MOSAIC_HOST_DEVICE inline float key_logit(std::uint64_t key) {
  const auto ordered = static_cast<std::uint32_t>(key >> 32);
  const std::uint32_t bits = (ordered & 0x80000000u) ? ordered & 0x7FFFFFFFu : ~ordered;
  float logit;
  std::memcpy(&logit, &bits, sizeof logit);
  return logit;
}

// Per row r of logits [rows, vocab], by temperatures[r] (double: the host's arithmetic):
//   < 0  nothing is written (the caller reads that row whole);
//   0    first_max[r], max_logit[r]: the first maximum, ignoring NaN (index 0 when there is none);
//   > 0  also normaliser[r] = Σ exp((logit − max) / T) over the row, and keys[r, 0..n) the
//        n = min(candidates, vocab) most probable as token_keys, most probable first; keys[r, n..)
//        are 0. A NaN logit sorts above every number, as token_key orders it.
// CPU reference:
void token_candidates_reference(const float* logits, int rows, int vocab, const double* temperatures, int candidates,
                                std::int32_t* first_max, float* max_logit, double* normaliser, std::uint64_t* keys);

// CUDA: the same on device pointers, one block per row, on `stream` (a cudaStream_t).
// 1 ≤ candidates ≤ kMaxCandidates. Returns the cudaError_t of the launch as an int.
constexpr int kMaxCandidates = 1024;
int token_candidates_cuda(const float* logits, int rows, int vocab, const double* temperatures, int candidates,
                          std::int32_t* first_max, float* max_logit, double* normaliser, std::uint64_t* keys, void* stream);

}  // namespace mosaic::kernels
