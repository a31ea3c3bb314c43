#pragma once
// Sequences prefilling and then decoding together on one runtime, driven step by step with no engine
// thread in the timing: what bench-cuda and bench-device time.
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/host_store.h"
#include "runtime/runtime.h"
#include "runtime/sampler.h"

namespace mosaic::cli {

std::vector<std::int64_t> random_tokens(std::size_t n, std::uint64_t seed, std::int64_t vocab);

class StepDecoder {
 public:
  // One sequence per entry of `targets`, each with a random `prompt`-token prompt and KV blocks for
  // `max_len` positions. `trace`: steps record their routes (last().routes).
  StepDecoder(Runtime& rt, const HostStore& store, const std::vector<int>& targets, std::size_t prompt, std::int64_t max_len,
              bool trace = false);
  // From now on each sequence's next token is drawn with `p` (seeded per sequence), the draws timed
  // with the step, as the engine makes them; until then the greedy choice, untimed.
  void sample(const SamplingParams& p);
  // One step: each sequence's uncached tokens (its prompt first, then one token at a time; the
  // drawn or greedy token is appended). Returns the step's seconds.
  double step();
  // On a fresh decoder: the prefill and `warm_up` steps (a graph's capture among them), then the mean
  // seconds of `steps` decode steps.
  double mean_decode(int steps, int warm_up = 3);
  const StepResult& last() const { return last_; }
  // The last step's chunks: tokens run and positions cached after them.
  struct Chunk {
    std::int64_t tokens = 0, context = 0;
  };
  const std::vector<Chunk>& last_chunks() const { return chunks_; }

 private:
  Runtime& rt_;
  const HostStore& store_;
  std::vector<int> target_;
  std::vector<std::vector<std::int64_t>> tokens_;
  std::vector<std::vector<std::int32_t>> blocks_;
  std::vector<std::int64_t> cached_;
  bool trace_;
  std::vector<std::unique_ptr<Sampler>> samplers_;  // [sequences], once sample() is called
  StepResult last_;
  std::vector<Chunk> chunks_;
};

}  // namespace mosaic::cli
