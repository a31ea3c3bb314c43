#pragma once
// Programmatic dependent launches (sm_90): a kernel launched so may start while the kernel before it
// in the stream is finishing, its launch and block setup overlapping that kernel's tail; every kernel
// here waits for the grid before it (wait_for_previous_grid, kernel_util.cuh) before it touches
// memory, so what it computes is as under plain stream order. Process-wide; every launch honours it
// but read_probe's (a bandwidth probe, timed alone). The CUDA backend turns it on where
// programmatic_launches_possible(), unless MOSAIC_CUDA_PDL=0.
// A graph's event-record node between two kernels (a lone token's layer timer) leaves that boundary
// a plain one.
namespace mosaic::kernels {

void set_programmatic_launches(bool on);
bool programmatic_launches();
// The current device runs them (compute capability 9.0 or more) and the kernels were compiled for it
// (PTX of sm_90 or later: built for an older architecture and JIT-compiled, their waits would be
// missing). Defined with the CUDA kernels (launch.cu).
bool programmatic_launches_possible();

}  // namespace mosaic::kernels
