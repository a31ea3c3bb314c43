// One block per row. The row is read five times (from L2: the logits projection has just written
// it): the first maximum with the top byte's histogram, the normaliser with the second byte's, the
// last two bytes' histograms, and the collection. The histograms are a radix selection of the n-th
// largest ordered logit; the collection takes every logit above it and the lowest-index ties at it,
// and a bitonic sort in shared memory puts the n keys in order.
#include <climits>
#include <cmath>

#include "kernels/kernel_util.cuh"
#include "kernels/token_candidates.h"

namespace mosaic::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / kWarp;
constexpr unsigned kAll = 0xffffffffu;

struct Best {
  float value;
  int index;  // INT_MAX: none yet (only NaN seen)
};

// The larger value, ties to the lower index; values are never NaN.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.index == INT_MAX) return a;
  if (a.index == INT_MAX) return b;
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) b = better(b, Best{__shfl_xor_sync(kAll, b.value, o), __shfl_xor_sync(kAll, b.index, o)});
  return b;
}

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kAll, v, o);
  return v;
}

// Given the histogram of one byte of the ordered logits that match the bytes chosen so far, the byte
// of the rank-th largest, and its rank among those with that byte. Run by warp 0: lane j holds the
// eight digits 255 − 8j down to 248 − 8j, most significant first.
__device__ void choose_digit(const unsigned* hist, unsigned rank, unsigned* out) {
  const int lane = threadIdx.x % kWarp;
  unsigned count[8], total = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) total += count[k] = hist[255 - 8 * lane - k];
  unsigned inclusive = total;
#pragma unroll
  for (int o = 1; o < kWarp; o *= 2) {
    const unsigned v = __shfl_up_sync(kAll, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  unsigned before = inclusive - total;
  if (!(before < rank && rank <= inclusive)) return;  // one lane holds the digit
  bool found = false;
#pragma unroll
  for (int k = 0; k < 8; ++k) {  // unrolled, without a break, so that count stays in registers
    if (!found && before + count[k] >= rank) {
      out[0] = static_cast<unsigned>(255 - 8 * lane - k);
      out[1] = rank - before;
      found = true;
    }
    before += count[k];
  }
}

__global__ void __launch_bounds__(kThreads, 1) token_candidates_kernel(const float* __restrict__ logits, int vocab,
                                                                     const double* __restrict__ temperatures, int candidates,
                                                                     std::int32_t* __restrict__ first_max, float* __restrict__ max_logit,
                                                                     double* __restrict__ normaliser, std::uint64_t* __restrict__ keys) {
  wait_for_previous_grid();
  const int r = blockIdx.x;
  const double t = temperatures[r];
  if (t < 0) return;
  const float* x = logits + static_cast<long long>(r) * vocab;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int n = min(candidates, vocab);
  __shared__ Best bests[kWarps];
  __shared__ double sums[kWarps];
  __shared__ unsigned hist[256], chosen_digit[2], above, ties[kWarps];
  __shared__ std::uint64_t chosen[kMaxCandidates];

  // The n-th largest ordered logit, a byte at a time from the top: `prefix` holds the bytes chosen,
  // `rank` the place among the logits that share them.
  unsigned prefix = 0, mask = 0, rank = static_cast<unsigned>(n);
  // Counted a warp at a time: logits crowd into a few top bytes, so the lanes sharing a byte add once
  // (all 32 lanes call it, `counted` false past the row's end).
  auto count_byte = [&](unsigned o, bool counted, int shift) {
    const unsigned byte = counted && (o & mask) == prefix ? (o >> shift) & 255u : 256u;
    const unsigned same = __match_any_sync(kAll, byte);
    if (byte < 256u && lane == __ffs(same) - 1) atomicAdd(&hist[byte], static_cast<unsigned>(__popc(same)));
  };
  auto choose = [&](int shift) {
    __syncthreads();
    if (warp == 0) choose_digit(hist, rank, chosen_digit);
    __syncthreads();
    prefix |= chosen_digit[0] << shift;
    mask |= 255u << shift;
    rank = chosen_digit[1];
    if (tid < 256) hist[tid] = 0;  // hist was read before the barrier above
    __syncthreads();               // and is counted into after this one
  };
  if (tid < 256) hist[tid] = 0;
  __syncthreads();

  // The first maximum (NaN ignored), with the top byte's histogram.
  Best b{-INFINITY, INT_MAX};
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + tid;
    const float v = i < vocab ? x[i] : NAN;
    if (!isnan(v) && (b.index == INT_MAX || v > b.value)) b = {v, i};
    if (t > 0) count_byte(ordered_bits(v), i < vocab, 24);
  }
  b = warp_best(b);
  if (lane == 0) bests[warp] = b;
  __syncthreads();
  if (warp == 0) {
    b = warp_best(bests[lane]);
    if (lane == 0) {
      first_max[r] = b.index == INT_MAX ? 0 : b.index;
      max_logit[r] = b.index == INT_MAX ? -INFINITY : b.value;
      bests[0] = b;
    }
  }
  if (!(t > 0)) return;  // uniform over the block (a NaN temperature too: it has no draw)
  choose(24);
  const double top = bests[0].index == INT_MAX ? -INFINITY : static_cast<double>(bests[0].value);

  // The normaliser in double, as the host sums it, with the second byte's histogram.
  double s = 0;
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + tid;
    const float v = i < vocab ? x[i] : 0.0f;
    if (i < vocab) s += exp((static_cast<double>(v) - top) / t);
    count_byte(ordered_bits(v), i < vocab, 16);
  }
  s = warp_sum_double(s);
  if (lane == 0) sums[warp] = s;
  choose(16);  // its barriers also publish sums
  if (tid == 0) {
    double total = 0;
    for (int w = 0; w < kWarps; ++w) total += sums[w];
    normaliser[r] = total;
  }
  for (int shift = 8; shift >= 0; shift -= 8) {
    for (int base = 0; base < vocab; base += kThreads) {
      const int i = base + tid;
      count_byte(i < vocab ? ordered_bits(x[i]) : 0u, i < vocab, shift);
    }
    choose(shift);
  }

  // Every logit above the n-th largest, in any order, then the `rank` ties at it of the lowest
  // indices: a tile of the row at a time, the ties numbered by a scan over the tile.
  if (tid == 0) above = 0;
  __syncthreads();
  const unsigned threshold = prefix, first_tie = static_cast<unsigned>(n) - rank;
  unsigned ties_before = 0;
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + tid;
    const unsigned o = i < vocab ? ordered_bits(x[i]) : 0u;
    if (i < vocab && o > threshold) chosen[atomicAdd(&above, 1u)] = token_key(x[i], static_cast<std::uint32_t>(i));
    const bool tie = i < vocab && o == threshold && ties_before < rank;
    if (!__syncthreads_or(tie)) continue;
    const unsigned ballot = __ballot_sync(kAll, tie);
    if (lane == 0) ties[warp] = __popc(ballot);
    __syncthreads();
    unsigned before = ties_before + __popc(ballot & ((1u << lane) - 1u)), tile = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += ties[w];
      tile += ties[w];
    }
    if (tie && before < rank) chosen[first_tie + before] = token_key(x[i], static_cast<std::uint32_t>(i));
    ties_before += tile;
    __syncthreads();  // ties is rewritten by the next tile
  }

  // A bitonic sort of chosen[0, m), most probable first; the padding (key 0) sorts last.
  int m = 1;
  while (m < n) m <<= 1;
  for (int i = n + tid; i < m; i += kThreads) chosen[i] = 0;
  __syncthreads();
  for (int k = 2; k <= m; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < m; i += kThreads) {
        const int other = i ^ j;
        if (other <= i) continue;
        const std::uint64_t a = chosen[i], c = chosen[other];
        if ((i & k) == 0 ? a < c : a > c) {
          chosen[i] = c;
          chosen[other] = a;
        }
      }
      __syncthreads();
    }
  std::uint64_t* out = keys + static_cast<long long>(r) * candidates;
  for (int i = tid; i < candidates; i += kThreads) out[i] = i < n ? chosen[i] : 0;
}

}  // namespace

int token_candidates_cuda(const float* logits, int rows, int vocab, const double* temperatures, int candidates,
                          std::int32_t* first_max, float* max_logit, double* normaliser, std::uint64_t* keys, void* stream) {
  if (candidates < 1 || candidates > kMaxCandidates || vocab < 1 || rows < 0) return static_cast<int>(cudaErrorInvalidValue);
  if (rows == 0) return static_cast<int>(cudaSuccess);
  return launch_kernel(token_candidates_kernel, rows, kThreads, 0, as_stream(stream),
                       logits, vocab, temperatures, candidates, first_max, max_logit, normaliser, keys);
}

}  // namespace mosaic::kernels
