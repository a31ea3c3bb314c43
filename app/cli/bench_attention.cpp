// bench-forward --attention: one layer's decode attention on the CPU at long contexts, the CPU
// backend's kernel (runtime/cpu_attention.h: each sequence's rows read where they lie, a sequence split
// over the threads where there are fewer sequences than threads) against the LibTorch path the
// backend ran before it (every sequence's rows gathered into a padded batch, permuted, two batched
// products), both against the floor: the keys and values the step must read ÷
// the read rate measured in the same run. Sequences decode in lockstep at one context length, so the
// LibTorch path pads nothing here: its best case.
#include "cli/bench_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cli/best_seconds.h"
#include "cli/read_rate.h"
#include "common/huge_pages.h"
#include "runtime/cpu_attention.h"
#include "runtime/matmul_yardstick.h"
#include "runtime/threads.h"

namespace mosaic::cli {
namespace {

struct AttentionShape {
  std::string name;
  int heads, kv_heads, key_dim, value_dim;
  bool latent;  // the value is the key row's first value_dim floats (one pool, as MLA caches it)
};

struct Case {
  std::int64_t batch, context;
};

}  // namespace

void bench_decode_attention(int reps) {
  const std::vector<AttentionShape> shapes{
      {"Mixtral-8x7B (32 heads, 8 kv of 128)", 32, 8, 128, 128, false},
      {"DeepSeek-V2-Lite MLA (16 heads, latent 512 + rope 64)", 16, 1, 576, 512, true},
  };
  const std::vector<Case> cases{{1, 512}, {1, 2048}, {1, 8192}, {4, 2048}, {4, 8192}, {16, 2048}};
  const double gbs = read_gbs(std::size_t{1} << 30);
  // Where a shape computes more than it reads (latent attention: 16 heads share each row), its floor
  // is LibTorch's in-cache GEMM rate: a [64, 1024] × [1024, 1024] product, as bench --yardstick.
  const double gemm_gflops = measure_matmul(64, 1024, 1024).gflops;
  constexpr std::int64_t kBlock = 16;
  std::printf("Decode attention, one layer, fp32 KV pool in blocks of %lld rows scattered; %d threads, best of %d\n",
              static_cast<long long>(kBlock), at::get_num_threads(), reps);
  std::printf("read rate (1 GiB, every thread): %.2f GB/s; LibTorch's GEMM in cache: %.1f GFLOP/s. The floor is the longer of the KV\n"
              "bytes a step must read at that rate and its flops at that GEMM rate.\n",
              gbs, gemm_gflops);
  std::printf("%-54s %5s %7s %9s %7s | %10s %10s %8s | %9s %8s %8s\n", "shape", "batch", "context", "KV MB", "GFLOP", "LibTorch ms",
              "kernel ms", "speedup", "floor ms", "kernel×", "max |Δ|");
  std::mt19937_64 gen(7);
  for (const AttentionShape& sh : shapes)
    for (const Case& c : cases) {
      const std::int64_t B = c.batch, S = c.context, rows_total = B * S, kvh = sh.kv_heads, rep = sh.heads / sh.kv_heads;
      // The pool, its blocks handed out shuffled, as a long-running server's are.
      // Allocated as the backend's pool is (on 2 MiB pages where the kernel grants them), then filled.
      auto pool = [&](std::int64_t width) {
        at::Tensor t = at::empty({rows_total, kvh, width}, at::kFloat);
        advise_huge_pages(t.data_ptr(), t.nbytes());
        return t.normal_();
      };
      const at::Tensor K = pool(sh.key_dim);
      const at::Tensor V = sh.latent ? K.narrow(2, 0, sh.value_dim) : pool(sh.value_dim);
      std::vector<std::int64_t> blocks(static_cast<std::size_t>(rows_total / kBlock));
      std::iota(blocks.begin(), blocks.end(), 0);
      std::shuffle(blocks.begin(), blocks.end(), gen);
      std::vector<std::int64_t> rows, begin{0}, tokens(static_cast<std::size_t>(B));
      std::iota(tokens.begin(), tokens.end(), 0);
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t p = 0; p < S; ++p) rows.push_back(blocks[static_cast<std::size_t>((b * S + p) / kBlock)] * kBlock + p % kBlock);
        begin.push_back(static_cast<std::int64_t>(rows.size()));
      }
      const at::Tensor q = at::randn({B, sh.heads, sh.key_dim}, at::kFloat);
      const double scale = 1.0 / std::sqrt(static_cast<double>(sh.key_dim));
      at::Tensor out_torch = at::empty({B, sh.heads * sh.value_dim}, at::kFloat), out_kernel = at::empty_like(out_torch);
      const at::Tensor row_index = at::from_blob(rows.data(), {rows_total}, at::kLong).clone();
      const at::Tensor token_index = at::arange(B, at::kLong);
      const at::Tensor mask = at::zeros({B, 1, 1, S}, at::kFloat);  // as the backend added it (−∞ on padding; none here)
      const double torch_s = best_seconds(reps, [&] {
        const at::Tensor keys = K.index_select(0, row_index).view({B, S, kvh, sh.key_dim}).permute({0, 2, 3, 1}).reshape({B * kvh, sh.key_dim, S});
        const at::Tensor values =
            V.index_select(0, row_index).view({B, S, kvh, sh.value_dim}).permute({0, 2, 1, 3}).reshape({B * kvh, S, sh.value_dim});
        const at::Tensor qd = q.view({B * kvh, rep, sh.key_dim});
        const at::Tensor scores = (at::bmm(qd, keys) * scale).view({B, kvh, rep, S}) + mask;
        const at::Tensor o = at::bmm(at::softmax(scores, -1).view({B * kvh, rep, S}), values);
        out_torch.index_copy_(0, token_index, o.reshape({B, sh.heads * sh.value_dim}));
      });
      const DecodeAttention a{.q = q.data_ptr<float>(),
                              .out = out_kernel.data_ptr<float>(),
                              .tokens = tokens.data(),
                              .keys = K.data_ptr<float>(),
                              .values = V.data_ptr<float>(),
                              .key_row = K.stride(0),
                              .value_row = V.stride(0),
                              .rows = rows.data(),
                              .begin = begin.data(),
                              .heads = sh.heads,
                              .kv_heads = sh.kv_heads,
                              .key_dim = sh.key_dim,
                              .value_dim = sh.value_dim,
                              .scale = static_cast<float>(scale)};
      const double kernel_s = best_seconds(reps, [&] {
        decode_attention(a, B, at::get_num_threads(), parallel_ranges);
      });
      // What must be read: every key row, and the values where they are apart from it.
      const double bytes = static_cast<double>(rows_total) * static_cast<double>(kvh) *
                           static_cast<double>(sh.key_dim + (sh.latent ? 0 : sh.value_dim)) * sizeof(float);
      // q·k and weights·v: two multiply-adds per key and value element, for every head.
      const double gflop = 2.0 * static_cast<double>(rows_total) * sh.heads * (sh.key_dim + sh.value_dim) / 1e9;
      const double floor_s = std::max(bytes / (gbs * 1e9), gflop / gemm_gflops);
      const double diff = (out_torch - out_kernel).abs().max().item<double>();
      std::printf("%-54s %5lld %7lld %9.1f %7.3f | %10.2f %10.2f %7.2fx | %9.2f %8.2f %8.1e\n", sh.name.c_str(), static_cast<long long>(B),
                  static_cast<long long>(S), bytes / 1e6, gflop, torch_s * 1e3, kernel_s * 1e3, torch_s / kernel_s, floor_s * 1e3,
                  kernel_s / floor_s, diff);
    }
}

}  // namespace mosaic::cli
