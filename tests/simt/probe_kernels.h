#pragma once
// The launches of probe_kernels.cu, for tst_simt: each returns cudaGetLastError() after its launch.
#include <cstddef>

struct CUstream_st;

namespace simt_probe {

struct Shape {
  unsigned x = 1, y = 1, z = 1;
};

int collectives(int* out);                                // 64 threads, 8 ints each
int partial_warp(int threads, int* out);                  // an int per warp
int barrier(int threads, int flagged, int* out);          // 2 × threads ints
int early_exit(int threads, int alive, int* out);         // `alive` ints
int missing_lane(int* out);                               // 32 ints
int grid(Shape grid, Shape block, int* out);              // an int per thread of the grid
int own_arguments(int threads, int step, int* out);       // `threads` ints
int own_arguments_on(CUstream_st* stream, int threads, int step, int* out);  // the same, on `stream`
int dynamic_shared(int threads, std::size_t bytes, float* out);
int allow_dynamic_shared(int bytes);
int start_order(int blocks, int threads, int* tickets, int* counters);  // blocks × threads tickets, a counter a block
int warp_order(int blocks, int* tickets, int* counters);                // blocks × 2 warps × 4 tickets, a counter a block

}  // namespace simt_probe
