#include "runtime/reconfigurer.h"

#include <chrono>

#include "runtime/cpu_weights.h"

namespace mosaic {
namespace {

// Calls f(device tensor, host tensor) for every non-expert tensor of a model, in one fixed order.
// A tied lm_head is the embedding itself and is visited once, as the embedding.
template <class F>
void for_each_non_expert(ModelWeights& dev, const ModelWeights& host, bool tied, F&& f) {
  auto pair = [&](at::Tensor& d, const at::Tensor& h) {
    if (h.defined()) f(d, h);
  };
  pair(dev.embed, host.embed);
  pair(dev.final_norm, host.final_norm);
  if (!tied) pair(dev.lm_head, host.lm_head);
  for (std::size_t l = 0; l < host.layers.size(); ++l) {
    LayerWeights& d = dev.layers[l];
    const LayerWeights& h = host.layers[l];
    for (auto [dt, ht] : {std::pair{&d.input_norm, &h.input_norm}, {&d.post_norm, &h.post_norm}, {&d.wq, &h.wq},
                          {&d.wk, &h.wk}, {&d.wv, &h.wv}, {&d.wo, &h.wo}, {&d.bq, &h.bq}, {&d.bk, &h.bk},
                          {&d.bv, &h.bv}, {&d.bo, &h.bo}, {&d.q_norm, &h.q_norm}, {&d.k_norm, &h.k_norm},
                          {&d.router, &h.router}, {&d.shared.gate_up, &h.shared.gate_up},
                          {&d.shared.down, &h.shared.down}, {&d.shared_gate, &h.shared_gate}})
      pair(*dt, *ht);
  }
}

}  // namespace

Reconfigurer::Reconfigurer(const HostStore& store, DeviceBudget& budget)
    : store_(store), budget_(budget), weights_(std::make_unique<ModelWeights>()) {
  budget_.reserve(store.non_expert_bytes(), "non-expert weights of one variant");
  const ModelWeights& first = store.model(0).weights();
  weights_->layers.resize(first.layers.size());
  weights_->inv_freq = first.inv_freq;  // computed from the shared config, identical in every variant
  for_each_non_expert(*weights_, first, store.spec().tie_word_embeddings,
                      [](at::Tensor& d, const at::Tensor& h) { d = at::empty_like(h); });
  if (store.spec().tie_word_embeddings) weights_->lm_head = weights_->embed;
}

Reconfigurer::~Reconfigurer() { budget_.release(store_.non_expert_bytes()); }

SwapRecord Reconfigurer::ensure(int variant) {
  if (variant == resident_) return {};
  const auto t0 = std::chrono::steady_clock::now();
  SwapRecord r;
  r.swapped = true;
  for_each_non_expert(*weights_, store_.model(variant).weights(), store_.spec().tie_word_embeddings,
                      [&](at::Tensor& d, const at::Tensor& h) {
                        d.copy_(h);
                        r.bytes += static_cast<std::uint64_t>(h.nbytes());
                      });
  resident_ = variant;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace mosaic
