#pragma once
// Programmatic dependent launches (sm_90): a kernel launched so may start while the kernel before it
// in the stream is finishing, its launch and block setup overlapping that kernel's tail; every kernel
// here waits for the grid before it (wait_for_previous_grid, kernel_util.cuh) before it touches
// memory, so what it computes is as under plain stream order. Process-wide; the decode step's kernels
// honour it. Off until measured on the device: the CUDA backend turns it on with MOSAIC_CUDA_PDL=1.
namespace mosaic::kernels {

void set_programmatic_launches(bool on);
bool programmatic_launches();

}  // namespace mosaic::kernels
