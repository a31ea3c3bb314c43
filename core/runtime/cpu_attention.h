#pragma once
// Decode attention over the paged KV pool, where the rows lie: one query token per sequence against
// that sequence's cached keys and values, each row read once, no gather into a padded batch. What a
// decode step must read is its sequences' keys and values; this reads that and nothing else twice
// (LibTorch's batched path copied both twice before its matrix products). No LibTorch.
#include <cstdint>
#include <functional>

namespace mosaic {

struct DecodeAttention {
  const float* q = nullptr;    // [tokens, heads, key_dim]: sequence b's query is token tokens[b]
  float* out = nullptr;        // [tokens, heads · value_dim]: written at the same tokens
  const std::int64_t* tokens = nullptr;  // [B]
  // Row r's key for kv head g at keys + r · key_row + g · key_dim; its value at values + r · value_row
  // + g · value_dim. Latent attention: values == keys, one kv head, the value the key row's first
  // value_dim floats.
  const float* keys = nullptr;
  const float* values = nullptr;
  std::int64_t key_row = 0, value_row = 0;
  // Sequence b reads the pool rows rows[begin[b]] … rows[begin[b + 1] − 1], in position order.
  const std::int64_t* rows = nullptr;
  const std::int64_t* begin = nullptr;  // [B + 1]
  int heads = 0, kv_heads = 0, key_dim = 0, value_dim = 0;  // head h reads kv head h / (heads / kv_heads)
  float scale = 1;
};

// Runs f(begin, end) over ranges covering [0, n), on as many threads as it has (at::parallel_for
// in the backend), returning when every range has run.
using ParallelRanges = std::function<void(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f)>;

// Every sequence's attention, its heads together over its rows (a row's kv heads lie side by side),
// a tile of rows at a time; where there are fewer sequences than threads, a sequence's rows are split
// into parts over the threads and the parts' online-softmax states merged (flash-decoding). `threads`:
// how many `parallel` runs on.
void decode_attention(const DecodeAttention& a, std::int64_t sequences, int threads, const ParallelRanges& parallel);

}  // namespace mosaic
