#pragma once
// bench-forward's engine rows (issue 64): decode ms/step at batch 1, 4 and 16 and prefill tokens/s at
// 128 and 512 through the engine's CPU backend, against the floor of the bytes a step reads.
#include <cstdint>
#include <filesystem>

namespace mosaic::cli {

// Writes the ~0.6 B synthetic Mixtral into dir/bf16 and dir/fp32 (1.2 and 2.4 GB) and two bf16
// fine-tunes sharing half their experts into dir/bf16-pair (2.6 GB) where absent, then measures and
// prints the rows (the fine-tunes served together, at batch 4 and 16).
void bench_engine_decode(const std::filesystem::path& dir, std::int64_t decode, int reps, int threads);

}  // namespace mosaic::cli
