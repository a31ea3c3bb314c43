// How long streaming text costs per token as an answer grows: TextStream over random ids of a
// tokenizer, 256 to 16,384 tokens. Build against a default build's libraries, from the project root:
//   L="build/default/core/libmosaic_core.a build/default/kernels/libmosaic_kernels.a /usr/local/cuda/lib/libcudart_static.a \
//      -ldl -lrt -Wl,--no-as-needed /usr/lib/x86_64-linux-gnu/libtorch.so.1.13.0 /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0 \
//      -Wl,--as-needed /usr/lib/x86_64-linux-gnu/libc10.so -lsqlite3 -lcrypto -lz -lpthread"
//   g++ -std=c++20 -O2 -Icore docs/bench/text_stream.cpp $L -o /tmp/text-stream && /tmp/text-stream resources/sample-family/base/tokenizer.json
// To time another TextStream (an older one), add its text_stream.cpp to the command with -I to its header.
#include <chrono>
#include <cstdio>
#include <random>

#include "model/text_stream.h"
#include "model/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: text-stream TOKENIZER.json\n");
    return 2;
  }
  const mosaic::Tokenizer t = mosaic::Tokenizer::load(argv[1]);
  for (int n : {256, 1024, 4096, 16384}) {
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<std::int64_t> id(3, t.vocab_size() - 1);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (auto& i : ids) i = id(rng);
    const auto t0 = std::chrono::steady_clock::now();
    mosaic::TextStream s(t);
    std::size_t bytes = 0;
    for (auto i : ids) bytes += s.push(i).size();
    bytes += s.finish().size();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%6d tokens: %10.3f ms in all, %8.2f us per token (%zu bytes)\n", n, sec * 1e3, sec / n * 1e6, bytes);
  }
}
