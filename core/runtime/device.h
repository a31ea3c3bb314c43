#pragma once
// Which device a runtime computes on. The CPU backend (LibTorch, fp32) is the reference; the CUDA
// backend (bf16 weights, fp32 accumulation) is what the product serves with.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mosaic {

enum class Device { Cpu, Cuda };

std::string_view device_name(Device d);
// "cpu" or "cuda"; nullopt for another name.
std::optional<Device> parse_device(std::string_view name);
// nullopt when `d` can run here; else why not, in a sentence (no GPU, no driver, a build without CUDA).
std::optional<std::string> device_unavailable(Device d);
// What a run on `d` ran on, for records and reports: "cpu" (the fp32 reference; the machine is
// recorded apart), or "cuda: NVIDIA H100 80GB HBM3, 79.2 GiB, compute 9.0" ("cuda" alone where no GPU can be used).
std::string device_description(Device d);
// The memory a budget on `d` stands for: the machine's RAM on the CPU, the GPU's memory on CUDA
// (nullopt where no GPU can be used).
std::optional<std::uint64_t> device_memory_bytes(Device d);

// How the CPU backend holds weights. Stored: bf16 tensors stay bf16 in its slots and set buffers,
// widened to fp32 in registers as a decode step reads them (exact: the results are fp32's, bit for
// bit), at half the bytes to hold, copy and stream; other dtypes are widened to fp32 when loaded.
// Fp32: every weight widened when loaded (the reference forward's layout; twice the memory).
// Mapped: as Stored, but a bf16 or fp32 tensor is not copied at all: slots and set buffers are the
// checkpoints' mapped bytes, read in place (the host tier must hold every tensor: no host budget).
// Loads and swaps then cost nothing and the process holds the files once; a budget still decides
// what the runtime plans as resident, but on a CPU nothing is moved to honour it.
enum class CpuWeights { Stored, Fp32, Mapped };
std::string_view cpu_weights_name(CpuWeights w);
std::optional<CpuWeights> parse_cpu_weights(std::string_view name);  // "stored", "fp32" or "mapped"

}  // namespace mosaic
