#include <cfloat>

#include "kernels/dot_rows.cuh"
#include "kernels/moe_experts.h"
#include "kernels/router_topk.cuh"

namespace mosaic::kernels {
namespace {

// SwapMoE's mask on one token's row, by one warp: unless no expert of its table row is resident.
__device__ __forceinline__ void mask_row(float* logits, const std::int32_t* entry, int experts) {
  const int lane = threadIdx.x % kWarp;
  int any = 0;
  for (int e = lane; e < experts; e += kWarp) any |= entry[e] >= 0;
  any = __any_sync(0xffffffffu, any);
  if (!any) return;
  for (int e = lane; e < experts; e += kWarp)
    if (entry[e] < 0) logits[e] = -INFINITY;
}

__global__ void mask_router_kernel(float* logits, const std::int32_t* rows, const std::int32_t* table, int experts) {
  wait_for_previous_grid();
  const int t = blockIdx.x;  // warp 0 alone
  mask_row(logits + static_cast<std::int64_t>(t) * experts, table + static_cast<std::int64_t>(rows[t]) * experts, experts);
}

// A block a token: its norm over the block, then a thread a pair.
constexpr int kImportanceThreads = 128;
__global__ void importance_add_kernel(const float* h, int hidden, int k, const std::int32_t* ids, const float* weights,
                                      const std::int32_t* rows, int experts, float* scores) {
  __shared__ float shared32[kWarp];
  wait_for_previous_grid();
  const int t = blockIdx.x;
  const float* x = h + static_cast<std::int64_t>(t) * hidden;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += x[i] * x[i];
  const float norm = sqrtf(block_sum(ss, shared32));
  if (threadIdx.x >= k) return;
  const std::int64_t pair = static_cast<std::int64_t>(t) * k + threadIdx.x;
  if (ids[pair] < 0) return;
  atomicAdd(scores + static_cast<std::int64_t>(rows[t]) * experts + ids[pair], norm * weights[pair]);
}

constexpr int kRerouteThreads = 1024;

// Exclusive scan of one int per thread across the block; returns this thread's prefix, total in *total.
__device__ int block_exclusive_scan(int v, int* shared, int* total) {
  const int tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (int o = 1; o < blockDim.x; o *= 2) {
    const int add = tid >= o ? shared[tid - o] : 0;
    __syncthreads();
    shared[tid] += add;
    __syncthreads();
  }
  const int inclusive = shared[tid];
  *total = shared[blockDim.x - 1];
  __syncthreads();
  return inclusive - v;
}

// The reroute by a whole block (its counts and scans are block-wide).
__device__ void reroute_block(const std::int32_t* ids, const std::int32_t* rows, int pairs, int k, const std::int32_t* table,
                              int experts, int slots, const bf16_t* base, std::int64_t stride, int* count, int* fill,
                              GroupedPairs out) {
  __shared__ int scan[kRerouteThreads];
  __shared__ int misses;
  const int tid = threadIdx.x;
  if (tid == 0) misses = 0;
  for (int s = tid; s < slots; s += blockDim.x) { count[s] = 0; fill[s] = 0; }
  __syncthreads();
  for (int p = tid; p < pairs; p += blockDim.x) {
    const int s = table[static_cast<std::int64_t>(rows[p / k]) * experts + ids[p]];
    if (s >= 0) atomicAdd(&count[s], 1);
    else atomicAdd(&misses, 1);
  }
  __syncthreads();
  // Each thread owns a run of slots: positions and group numbers by two block scans.
  const int per = (slots + blockDim.x - 1) / blockDim.x;
  const int lo = min(slots, tid * per), hi = min(slots, lo + per);
  int sum = 0, used = 0;
  for (int s = lo; s < hi; ++s) { sum += count[s]; used += count[s] > 0; }
  int total_pairs, total_groups;
  int pos = block_exclusive_scan(sum, scan, &total_pairs);
  int group = block_exclusive_scan(used, scan, &total_groups);
  for (int s = lo; s < hi; ++s) {
    const int n = count[s];
    if (n == 0) continue;
    out.begin[group] = pos;
    out.end[group] = pos + n;
    out.weights[group] = base + s * stride;
    count[s] = pos;  // from here on: the slot's first position
    pos += n;
    ++group;
  }
  __syncthreads();
  for (int p = tid; p < pairs; p += blockDim.x) {
    const int s = table[static_cast<std::int64_t>(rows[p / k]) * experts + ids[p]];
    int at = -1;
    if (s >= 0) {
      at = count[s] + atomicAdd(&fill[s], 1);
      out.pair_at[at] = p;
    }
    out.pos_of[p] = at;
  }
  if (tid == 0) {
    *out.groups = total_groups;
    *out.misses = misses;
  }
}

__global__ void __launch_bounds__(kRerouteThreads) reroute_kernel(const std::int32_t* ids, const std::int32_t* rows, int pairs, int k, const std::int32_t* table,
                               int experts, int slots, const bf16_t* base, std::int64_t stride, int* count, int* fill,
                               GroupedPairs out) {
  wait_for_previous_grid();
  reroute_block(ids, rows, pairs, k, table, experts, slots, base, stride, count, fill, out);
}

// A decode step's mask, top-k and reroute in one block: each warp takes tokens' rows, then the
// block reroutes what they chose (global writes are visible to the block after __syncthreads).
__global__ void __launch_bounds__(kRerouteThreads) route_kernel(float* logits, bool mask, bool renormalize, std::int32_t* ids, float* weights, const std::int32_t* rows,
                             int tokens, int k, const std::int32_t* table, int experts, int slots, const bf16_t* base,
                             std::int64_t stride, int* count, int* fill, GroupedPairs out) {
  wait_for_previous_grid();
  for (int t = threadIdx.x / kWarp; t < tokens; t += blockDim.x / kWarp) {
    float* row = logits + static_cast<std::int64_t>(t) * experts;
    if (mask) {
      mask_row(row, table + static_cast<std::int64_t>(rows[t]) * experts, experts);
      __syncwarp();  // orders the masking before the top-k's reads of the row
    }
    topk_of_row(row, experts, k, renormalize, ids + t * k, weights + t * k);
  }
  __syncthreads();
  reroute_block(ids, rows, tokens * k, k, table, experts, slots, base, stride, count, fill, out);
}

// The reroute of at most kWarp pairs (a decode step of a few tokens) by warp 0, with votes in place
// of the block's counting sort and scans: lane p holds pair p, and its position is the number of
// served pairs before it in (slot, pair) order. The block version's two scans over 1024 threads are
// some 40 barriers, more than the rest of a one-token step's routing. Groups come in slot order, as
// there; within a group pairs come in pair order.
__device__ void reroute_warp(const std::int32_t* ids, const std::int32_t* rows, int pairs, int k, const std::int32_t* table,
                             int experts, const bf16_t* base, std::int64_t stride, GroupedPairs out) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % kWarp;
  const bool mine = lane < pairs;
  const int slot = mine ? table[static_cast<std::int64_t>(rows[lane / k]) * experts + ids[lane]] : -1;
  const bool served = slot >= 0;
  const unsigned same = __match_any_sync(kAll, served ? slot : -1 - lane);  // an unserved lane stands alone
  const unsigned served_lanes = __ballot_sync(kAll, served);
  const unsigned leaders = __ballot_sync(kAll, served && lane == __ffs(static_cast<int>(same)) - 1);
  const unsigned missed = __ballot_sync(kAll, mine && !served);
  int before = 0, groups_before = 0;  // served pairs, and groups, on lower slots
  for (int q = 0; q < kWarp; ++q) {
    const int s = __shfl_sync(kAll, slot, q);
    if ((served_lanes >> q & 1u) && s < slot) {
      ++before;
      groups_before += leaders >> q & 1u;
    }
  }
  const int pos = before + __popc(same & ((1u << lane) - 1u));
  if (mine) out.pos_of[lane] = served ? pos : -1;
  if (served) out.pair_at[pos] = lane;
  if (leaders >> lane & 1u) {
    out.begin[groups_before] = pos;
    out.end[groups_before] = pos + __popc(same);
    out.weights[groups_before] = base + slot * stride;
  }
  if (lane == 0) {
    *out.groups = __popc(leaders);
    *out.misses = __popc(missed);
  }
}

// What the small routing reads and writes besides the logits.
struct SmallRouting {
  bool mask, renormalize;
  std::int32_t* ids;
  float* weights;
  const std::int32_t* rows;
  int tokens, k;
  const std::int32_t* table;
  int experts;
  const bf16_t* base;
  std::int64_t stride;
  GroupedPairs out;
};

// route_kernel for at most kWarp pairs: a warp per token's top-k, then reroute_warp.
__device__ void route_small(float* logits, const SmallRouting& r) {
  for (int t = threadIdx.x / kWarp; t < r.tokens; t += blockDim.x / kWarp) {
    float* row = logits + static_cast<std::int64_t>(t) * r.experts;
    if (r.mask) {
      mask_row(row, r.table + static_cast<std::int64_t>(r.rows[t]) * r.experts, r.experts);
      __syncwarp();
    }
    topk_of_row(row, r.experts, r.k, r.renormalize, r.ids + t * r.k, r.weights + t * r.k);
  }
  __syncthreads();  // every token's ids written
  if (threadIdx.x < kWarp) reroute_warp(r.ids, r.rows, r.tokens * r.k, r.k, r.table, r.experts, r.base, r.stride, r.out);
}

__global__ void __launch_bounds__(1024) route_small_kernel(float* logits, SmallRouting r) {
  wait_for_previous_grid();
  route_small(logits, r);
}

// The post-attention norm and the router before route_small, in the same block: h and the logits
// are written with rms_norm_kernel's and linear_kernel's sums in their order, for the experts, the
// shared expert and the prefetch's prediction to read. (The same bits as the separate launches
// where the backend's router runs linear_kernel, up to kGemvRows tokens; past that it runs cuBLAS
// on a bf16 copy of h, and fp32 here is the closer to the CPU's.) Up to 1024 threads: rms_norm's.
__device__ __forceinline__ void norm_route(const float* x, const NormRouter& nr, float* h, float* logits, const SmallRouting& r) {
  __shared__ float partial[kWarp];
  const int width = nr.hidden;
  for (int t = 0; t < r.tokens; ++t) {
    const std::int64_t at = static_cast<std::int64_t>(t) * width;
    rms_norm_row(x + at, nr.norm, width, nr.eps, h + at, partial);
  }
  __syncthreads();  // h whole before a warp reads another's part of it
  const int warps = blockDim.x / kWarp;
  for (int task = threadIdx.x / kWarp; task < r.tokens * r.experts; task += warps) {
    const int t = task / r.experts, e = task % r.experts;
    const float* xs[1] = {h + static_cast<std::int64_t>(t) * width};
    float logit[1];
    dot_rows<1>(nr.router + static_cast<std::int64_t>(e) * width, width, xs, 1, logit);
    if (threadIdx.x % kWarp == 0) logits[task] = logit[0];
  }
  __syncthreads();  // every logit written
  route_small(logits, r);
}

__global__ void __launch_bounds__(1024) norm_route_kernel(const float* x, NormRouter nr, float* h, float* logits, SmallRouting r) {
  wait_for_previous_grid();
  norm_route(x, nr, h, logits, r);
}

// The attention's output projection into the residual, x += in_rows · Wᵀ (+ bias), as linear_kernel
// adds it (a warp a row, TOK tokens a pass), then norm_route by the last block to finish. That block
// has 256 threads where norm_route_kernel has rms_norm_threads(hidden): h's sums are in another order.
// `router`: the router's and the norm's weights, asked of the L2 by every block before its wait,
// for the last block's tail (one block's 8 warps read E router rows, 8 at a time).
template <int TOK>
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    project_norm_route_kernel(Projection p, float* x, NormRouter nr, float* h, float* logits, SmallRouting r, L2Prefetch router) {
  prefetch_l2(router, blockIdx.x, gridDim.x);
  wait_for_previous_grid();
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row < nr.hidden)
    for (int first = 0; first < r.tokens; first += TOK) linear_row<TOK>(p.rows, r.tokens, p.in, p.w, nr.hidden, row, first, p.bias, true, x);
  if (!last_block_done(p.counter)) return;
  norm_route(x, nr, h, logits, r);
}

// Grid: x over weight rows (kRowsPerBlock per block), y over groups; each block walks its group's
// positions TOK at a time.
template <int TOK>
__global__ void gate_up_kernel(const float* __restrict__ x, int hidden, int inter, int k, GroupedPairs g,
                               float* __restrict__ act) {
  wait_for_previous_grid();
  if (static_cast<int>(blockIdx.y) >= *g.groups) return;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= inter) return;
  const bf16_t* w = g.weights[blockIdx.y];
  const int begin = g.begin[blockIdx.y], end = g.end[blockIdx.y];
  for (int first = begin; first < end; first += TOK) {
    const int count = min(TOK, end - first);
    const float* xs[TOK];
#pragma unroll
    for (int t = 0; t < TOK; ++t) xs[t] = x + static_cast<std::int64_t>(g.pair_at[first + (t < count ? t : 0)] / k) * hidden;
    float gate[TOK], up[TOK];
    dot_row_pair<TOK>(w + static_cast<std::int64_t>(row) * hidden, xs, w + static_cast<std::int64_t>(inter + row) * hidden, xs, hidden, count,
                      gate, up);
    if (threadIdx.x % kWarp == 0)
#pragma unroll
      for (int t = 0; t < TOK; ++t)
        if (t < count) act[static_cast<std::int64_t>(first + t) * inter + row] = gate[t] / (1.0f + __expf(-gate[t])) * up[t];
  }
}

template <int TOK>
__global__ void down_kernel(const float* __restrict__ act, int hidden, int inter, GroupedPairs g, float* __restrict__ out) {
  wait_for_previous_grid();
  if (static_cast<int>(blockIdx.y) >= *g.groups) return;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= hidden) return;
  const bf16_t* w = g.weights[blockIdx.y] + 2 * static_cast<std::int64_t>(inter) * hidden;
  const int begin = g.begin[blockIdx.y], end = g.end[blockIdx.y];
  for (int first = begin; first < end; first += TOK) {
    const float* xs[TOK];
    const int count = row_pointers<TOK>(act, inter, first, end, xs);
    float acc[TOK];
    dot_rows<TOK>(w + static_cast<std::int64_t>(row) * inter, inter, xs, count, acc);
    if (threadIdx.x % kWarp == 0)
#pragma unroll
      for (int t = 0; t < TOK; ++t)
        if (t < count) out[static_cast<std::int64_t>(first + t) * hidden + row] = acc[t];
  }
}

__global__ void combine_kernel(const float* out, const std::int32_t* pos_of, const float* weights, int k, int hidden, float* x) {
  wait_for_previous_grid();
  const int t = blockIdx.x;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      const int pos = pos_of[t * k + j];
      if (pos >= 0) sum += weights[t * k + j] * out[static_cast<std::int64_t>(pos) * hidden + c];
    }
    x[static_cast<std::int64_t>(t) * hidden + c] += sum;
  }
}

// The down projection and the combine for a step of one token, so no pair's output goes through
// memory: x[row] += Σ_j weights[j] · (down_j[row] · act_j). A down row is long (the intermediate size)
// and there are only `hidden` of them, so each row's sums are split over kCombineSlices warps, each
// taking a slice of the intermediate dimension for every pair: a warp per row left 15 warps an SM on
// the H100 and read at 0.56 of the bandwidth (2026-11-28), where gate_up's many short warps read at
// 0.84. The slices' partial sums meet in shared memory, added in slice order. A pair's group is found
// among the G ≤ k groups by its position.
constexpr int kCombineRows = 2, kCombineSlices = 4;  // warps per block: rows × slices

__global__ void __launch_bounds__(kCombineRows * kCombineSlices * kWarp)
    down_combine_kernel(const float* __restrict__ act, int hidden, int inter, int k, GroupedPairs g,
                        const float* __restrict__ weights, float* __restrict__ x, L2Prefetch next) {
  wait_for_previous_grid();
  __shared__ float partial[kCombineRows][kCombineSlices];
  const int warp = threadIdx.x / kWarp, r = warp / kCombineSlices, slice = warp % kCombineSlices;
  const int row = blockIdx.x * kCombineRows + r;
  // The slice's part of the intermediate dimension: whole 16-byte pieces where dot_rows reads them
  // (inter a multiple of 8), else one warp takes the whole row, element by element.
  const int slices = inter % 8 == 0 ? kCombineSlices : 1;
  const int piece = inter % 8 == 0 ? ((inter / 8 + slices - 1) / slices) * 8 : inter;
  const int lo = min(slice * piece, inter), hi = min(lo + piece, inter);
  float sum = 0;
  if (row < hidden && lo < hi) {
    const int groups = *g.groups;
    // Pair j's slice of its down row and of its activations, or false for a pair no slot serves.
    auto operands = [&](int j, const bf16_t*& w, const float*& a) {
      const int pos = g.pos_of[j];
      if (pos < 0) return false;
      int group = 0;
      while (group + 1 < groups && pos >= g.end[group]) ++group;
      w = g.weights[group] + 2 * static_cast<std::int64_t>(inter) * hidden + static_cast<std::int64_t>(row) * inter + lo;
      a = act + static_cast<std::int64_t>(pos) * inter + lo;
      return true;
    };
    for (int j = 0; j < k; j += 2) {  // two pairs at a time, their loads in flight together; summed in j order
      const bf16_t *wa = nullptr, *wb = nullptr;
      const float *xa = nullptr, *xb = nullptr;
      const bool a = operands(j, wa, xa), b = j + 1 < k && operands(j + 1, wb, xb);
      float da[1] = {0.0f}, db[1] = {0.0f};
      if (a && b) {
        dot_row_pair<1>(wa, &xa, wb, &xb, hi - lo, 1, da, db);
      } else if (a) {
        dot_rows<1>(wa, hi - lo, &xa, 1, da);
      } else if (b) {
        dot_rows<1>(wb, hi - lo, &xb, 1, db);
      }
      if (a) sum += weights[j] * da[0];
      if (b) sum += weights[j + 1] * db[0];
    }
  }
  if (threadIdx.x % kWarp == 0) partial[r][slice] = sum;
  __syncthreads();
  if (row < hidden && threadIdx.x % (kCombineSlices * kWarp) == 0) {  // the row's first warp's lane 0
    float total = 0;
#pragma unroll
    for (int z = 0; z < kCombineSlices; ++z) total += partial[r][z];
    x[row] += total;
  }
  // What the next layer reads first, asked for by the last quarter of the blocks as they leave, while
  // the memory's load falls off (asked for earlier, the rest of the down rows would evict it).
  const unsigned tail = (gridDim.x + 3) / 4, from_end = gridDim.x - 1 - blockIdx.x;
  if (from_end < tail) prefetch_l2(next, from_end, tail);
}

// What norm_route's one block takes: the router's rows, and a pair a lane for reroute_warp.
bool routes_in_one_block(int tokens, int k, int experts, int hidden) {
  static_assert(kNormRouteMaxPairs <= kWarp, "reroute_warp holds a pair a lane");
  return experts <= kNormRouteMaxExperts && k > 0 && k <= experts && tokens > 0 && tokens * k <= kNormRouteMaxPairs && hidden > 0;
}

// Decode groups are small: 4 positions per pass keeps registers low; prefill groups go to cuBLAS.
constexpr int kGroupTok = 4;

}  // namespace

int mask_router_cuda(float* logits, const std::int32_t* rows, const std::int32_t* table, int tokens, int experts, void* stream) {
  if (tokens == 0) return 0;
  return launch_kernel(mask_router_kernel, tokens, kWarp, 0, as_stream(stream), logits, rows, table, experts);
}

int importance_add_cuda(const float* h, int hidden, int tokens, int k, const std::int32_t* ids, const float* weights,
                        const std::int32_t* rows, int experts, float* scores, void* stream) {
  if (k > kImportanceThreads || k <= 0 || hidden <= 0) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens == 0) return 0;
  return launch_kernel(importance_add_kernel, tokens, kImportanceThreads, 0, as_stream(stream), h, hidden, k, ids, weights, rows, experts,
                       scores);
}

int reroute_cuda(const std::int32_t* ids, const std::int32_t* rows, int tokens, int k, const std::int32_t* table,
                 int experts, int slots, const bf16_t* base, std::int64_t stride, int* scratch, GroupedPairs out,
                 void* stream) {
  return launch_kernel(reroute_kernel, 1, kRerouteThreads, 0, as_stream(stream), ids, rows, tokens * k, k, table, experts, slots, base,
                       stride, scratch, scratch + slots, out);
}

int route_cuda(float* logits, bool mask, bool renormalize, std::int32_t* ids, float* weights, const std::int32_t* rows, int tokens,
               int k, const std::int32_t* table, int experts, int slots, const bf16_t* base, std::int64_t stride, int* scratch,
               GroupedPairs out, void* stream) {
  if (experts > kRouterMaxExperts || k > experts || k <= 0 || tokens * k > kRouteMaxPairs) return static_cast<int>(cudaErrorInvalidValue);
  if (tokens * k <= kWarp) {  // a decode step of a few tokens: a warp a token, no block-wide scans
    const int warps = tokens > 0 ? tokens : 1;
    const SmallRouting r{mask, renormalize, ids, weights, rows, tokens, k, table, experts, base, stride, out};
    return launch_kernel(route_small_kernel, 1, warps * kWarp, 0, as_stream(stream), logits, r);
  }
  return launch_kernel(route_kernel, 1, kRerouteThreads, 0, as_stream(stream),
                       logits, mask, renormalize, ids, weights, rows, tokens, k, table, experts,
                       slots, base, stride, scratch, scratch + slots, out);
}

int norm_route_cuda(const float* x, const NormRouter& nr, float* h, float* logits, bool mask, bool renormalize, std::int32_t* ids,
                    float* weights, const std::int32_t* rows, int tokens, int k, const std::int32_t* table, int experts, const bf16_t* base,
                    std::int64_t stride, GroupedPairs out, void* stream) {
  if (!routes_in_one_block(tokens, k, experts, nr.hidden)) return static_cast<int>(cudaErrorInvalidValue);
  const SmallRouting r{mask, renormalize, ids, weights, rows, tokens, k, table, experts, base, stride, out};
  return launch_kernel(norm_route_kernel, 1, rms_norm_threads(nr.hidden), 0, as_stream(stream), x, nr, h, logits, r);
}

int norm_route_cuda(float* x, const Projection& first, const NormRouter& nr, float* h, float* logits, bool mask, bool renormalize,
                    std::int32_t* ids, float* weights, const std::int32_t* rows, int tokens, int k, const std::int32_t* table, int experts,
                    const bf16_t* base, std::int64_t stride, GroupedPairs out, void* stream) {
  if (!routes_in_one_block(tokens, k, experts, nr.hidden) || tokens > kProjectMaxTokens || first.in <= 0 || !first.counter)
    return static_cast<int>(cudaErrorInvalidValue);
  const SmallRouting r{mask, renormalize, ids, weights, rows, tokens, k, table, experts, base, stride, out};
  const std::size_t row_bytes = static_cast<std::size_t>(nr.hidden) * sizeof(bf16_t);
  const L2Prefetch router = L2Prefetch{}.add(nr.router, static_cast<std::size_t>(experts) * row_bytes).add(nr.norm, row_bytes);
  return launch_kernel(tokens == 1 ? project_norm_route_kernel<1> : project_norm_route_kernel<kProjectMaxTokens>,
                       blocks_for(nr.hidden, kRowsPerBlock), kRowsPerBlock * kWarp, 0, as_stream(stream), first, x, nr, h, logits, r, router);
}

int expert_down_combine_cuda(const float* act, int hidden, int inter, int k, GroupedPairs g, const float* weights, float* x,
                             void* stream, const L2Prefetch& next) {
  if (hidden == 0 || k == 0) return 0;  // nothing to add (a launch of no blocks is an error)
  if (k < 0) return static_cast<int>(cudaErrorInvalidValue);
  return launch_kernel(down_combine_kernel, blocks_for(hidden, kCombineRows), kCombineRows * kCombineSlices * kWarp, 0, as_stream(stream),
                       act, hidden, inter, k, g, weights, x, next);
}

int expert_gate_up_cuda(const float* x, int hidden, int inter, int k, GroupedPairs g, int max_groups, float* act, void* stream) {
  if (max_groups == 0) return 0;
  const dim3 grid(blocks_for(inter, kRowsPerBlock), static_cast<unsigned>(max_groups));
  return launch_kernel(gate_up_kernel<kGroupTok>, grid, kRowsPerBlock * kWarp, 0, as_stream(stream), x, hidden, inter, k, g, act);
}

int expert_down_cuda(const float* act, int hidden, int inter, GroupedPairs g, int max_groups, float* out, void* stream) {
  if (max_groups == 0) return 0;
  const dim3 grid(blocks_for(hidden, kRowsPerBlock), static_cast<unsigned>(max_groups));
  return launch_kernel(down_kernel<kGroupTok>, grid, kRowsPerBlock * kWarp, 0, as_stream(stream), act, hidden, inter, g, out);
}

int moe_combine_cuda(const float* out, const std::int32_t* pos_of, const float* weights, int tokens, int k, int hidden,
                     float* x, void* stream) {
  if (tokens == 0) return 0;
  return launch_kernel(combine_kernel, tokens, 256, 0, as_stream(stream), out, pos_of, weights, k, hidden, x);
}

}  // namespace mosaic::kernels
