#include "cli/step_decoder.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "runtime/step_draws.h"
#include "runtime/threads.h"

namespace mosaic::cli {

std::vector<std::int64_t> random_tokens(std::size_t n, std::uint64_t seed, std::int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(n);
  for (auto& t : v) t = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(vocab));
  return v;
}

StepDecoder::StepDecoder(Runtime& rt, const HostStore& store, const std::vector<int>& targets, std::size_t prompt, std::int64_t max_len,
                         bool trace)
    : rt_(rt), store_(store), target_(targets), trace_(trace) {
  std::int32_t next = 0;
  const std::int64_t per = (max_len + 15) / 16;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    tokens_.push_back(random_tokens(prompt, 7 + i, store.spec().vocab_size));
    blocks_.emplace_back();
    for (std::int64_t b = 0; b < per; ++b) blocks_.back().push_back(next++);
    cached_.push_back(0);
  }
}

void StepDecoder::sample(const SamplingParams& p) {
  samplers_.clear();
  for (std::size_t i = 0; i < target_.size(); ++i) {
    SamplingParams own = p;
    own.seed = p.seed + i;
    samplers_.push_back(std::make_unique<Sampler>(own));
  }
}

double StepDecoder::mean_decode(int steps, int warm_up) {
  step();
  for (int i = 0; i < warm_up; ++i) step();
  double total = 0;
  for (int i = 0; i < steps; ++i) total += step();
  return total / steps;
}

double StepDecoder::step() {
  StepBatch batch;
  batch.sequences = static_cast<int>(target_.size());
  std::vector<std::vector<std::int64_t>> chunk(target_.size());
  for (std::size_t i = 0; i < target_.size(); ++i) {
    chunk[i].assign(tokens_[i].begin() + cached_[i], tokens_[i].end());
    batch.chunks.push_back({.sequence = static_cast<int>(i), .target = target_[i], .buffer = rt_.buffer_of(store_.set_of(target_[i])),
                            .tokens = chunk[i], .start = cached_[i], .blocks = blocks_[i], .emit = Emit::Last, .trace = trace_});
    if (!samplers_.empty()) batch.chunks.back().draw_temperature = samplers_[i]->params().temperature;
  }
  std::stable_sort(batch.chunks.begin(), batch.chunks.end(), [](const StepChunk& a, const StepChunk& b) { return a.buffer < b.buffer; });
  const auto t0 = std::chrono::steady_clock::now();
  last_ = rt_.run(batch);
  std::vector<TokenDraw> draws;
  for (std::size_t c = 0; c < batch.chunks.size() && !samplers_.empty(); ++c)
    draws.push_back(step_draw(samplers_[static_cast<std::size_t>(batch.chunks[c].sequence)].get(), last_, c).value());
  draw_tokens(draws, static_cast<unsigned>(configured_threads()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  chunks_.clear();
  for (std::size_t c = 0; c < batch.chunks.size(); ++c) {
    const auto i = static_cast<std::size_t>(batch.chunks[c].sequence);
    const auto& v = last_.logits[c].values;
    chunks_.push_back({static_cast<std::int64_t>(chunk[i].size()), static_cast<std::int64_t>(tokens_[i].size())});
    cached_[i] = static_cast<std::int64_t>(tokens_[i].size());
    tokens_[i].push_back(draws.empty() ? std::max_element(v.begin(), v.end()) - v.begin() : draws[c].token);
  }
  return seconds;
}

}  // namespace mosaic::cli
