#pragma once
// bench-forward --attention (issue 64 #2): one layer's decode attention on the CPU at long contexts,
// the backend's kernel against LibTorch's batched path, both against the floor of the KV bytes read.

namespace mosaic::cli {

// Mixtral-8x7B's and DeepSeek-V2-Lite's attention shapes at batch 1–16 and contexts 512–8192; prints a
// table. Each timing is the best of `reps`.
void bench_decode_attention(int reps);

}  // namespace mosaic::cli
