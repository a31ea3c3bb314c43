#pragma once
// Internal (ATen): the CPU backend — copies of what a device would hold (bf16 weights as stored, or
// fp32: RuntimeConfig::cpu_weights): expert slots per layer and a shared scratch pool, K resident-set
// buffers of non-expert weights, and paged keys and values (fp32). Include only from the backend's own .cpp files.
#include <ATen/ATen.h>

#include <future>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu_weights.h"
#include "runtime/step_layout.h"

namespace mosaic::cpu {

struct ExpertSlots {
  at::Tensor gate_up;  // [dense slots, 2I, H]
  at::Tensor down;     // [dense slots, H, I]
  // CpuWeights::Mapped: [dense slots] each slot's own tensors, gate and up apart (the checkpoint's
  // mapped bytes, or fp32 copies of a dtype the kernels do not read); gate_up and down hold none then.
  std::vector<MlpWeights> in_place;
  // [slots]: where each slot's dense weights are; a delta-only slot's are its base's slot's (-1 until loaded).
  std::vector<std::int64_t> dense;
  std::vector<char> delta_only;  // [slots]
  std::vector<ExpertId> held;    // [slots]: what each slot holds (-1: nothing yet)
  // [slots]: a delta expert's packed Δ, copied as stored, added to the dense base on the fly.
  std::vector<HostDelta> delta;
  std::vector<char> has_delta;
  MlpWeights view(std::int64_t slot) const {
    const std::int64_t d = dense[static_cast<std::size_t>(slot)];
    if (d < 0) throw std::logic_error("a delta-only expert slot read before it was loaded");
    if (!in_place.empty()) return in_place[static_cast<std::size_t>(d)];
    return {gate_up[d], down[d]};
  }
};

struct SetBuffer {
  std::vector<TensorId> held;      // per non-expert name: the host tensor copied (-1: none)
  std::vector<at::Tensor> tensors; // per non-expert name: bf16 as stored, or fp32 (cpu_backend.cpp's set_dtype)
  ModelWeights weights;            // assembled from them; no routed experts
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const HostStore& store, const BackendShape& shape);

  TierRead load_expert(std::int64_t layer, SlotRef slot, ExpertId expert) override;
  std::uint64_t load_set(int buffer, int set) override;
  std::uint64_t start_set(int buffer, int set) override;
  bool set_ready(int buffer) override;
  void wait_set(int buffer) override;
  StepResult run(const StepBatch& batch, MoeState& moe) override;
  bool rebases() const override { return true; }
  void rebase(const HostStore& next, const StoreMap& map) override;

 private:
  // The MoE block of `layer` over every token of the step: h [tokens, H] → [tokens, H].
  at::Tensor moe(std::int64_t layer, const at::Tensor& h, const StepLayout& layout, MoeState& state, StepResult& result);
  // The prefetch policy: the next MoE layer's router over `layer`'s input h picks the experts that
  // are loaded into its spare slots now (synchronously: the CPU has no copy engine to hide them behind).
  void prefetch(std::int64_t layer, const at::Tensor& h, const StepLayout& layout, MoeState& state, StepResult& result);
  // One wave's slot groups of `layer` into `out`: each expert over its tokens, weighted.
  void run_groups(std::int64_t layer, const RouteWave& wave, const at::Tensor& h, std::span<const float> top_w,
                  std::int64_t k, at::Tensor& out) const;
  struct KvRows;
  KvRows kv_rows(const StepBatch& batch, const StepLayout& layout);
  at::Tensor project_qkv(std::int64_t layer, const LayerWeights& L, const at::Tensor& h, const at::Tensor& cos,
                         const at::Tensor& sin, const at::Tensor& write_rows);
  at::Tensor attend_all(std::int64_t layer, const at::Tensor& q, const StepBatch& batch, const StepLayout& layout,
                        const KvRows& rows);
  void reserve_kv(std::int64_t blocks);
  const ModelWeights& weights(int buffer) const { return buffers_[static_cast<std::size_t>(buffer)].weights; }
  std::uint64_t fill(int buffer, int set);  // load_set's work, on whichever thread runs it
  bool mapped() const { return shape_.cpu_weights == CpuWeights::Mapped; }
  // The dtype a buffer holds non-expert tensor `i` of the store in.
  at::ScalarType buffer_dtype(const HostTensor& t, std::size_t i) const;
  // Mapped: a slot's tensors from the store (`id` a dense expert), in place where they can be.
  MlpWeights expert_in_place(const HostStore& store, ExpertId id, TierRead& read) const;
  void assemble(SetBuffer& b) const;    // its weights from its tensors
  void repoint(const HostStore& next);  // Mapped, after a rebase: every view into the next store's files

  const HostStore* store_;  // the family's, until a change served in place hands over the next
  BackendShape shape_;
  at::ScalarType expert_dtype_ = at::kFloat;  // the slots': bf16 where every expert is stored so and the config allows
  std::vector<ExpertSlots> slots_;  // [layers]
  ExpertSlots scratch_;
  std::vector<SetBuffer> buffers_;
  std::unordered_map<std::string, std::size_t> name_index_;  // non-expert name → position
  at::Tensor inv_freq_;
  std::vector<at::Tensor> k_, v_;   // [layers]: [blocks · block_tokens, kvh, hd]
  std::int64_t kv_blocks_ = 0;
  // [buffers]: a fill ahead (start_set) on a thread of its own while steps run on the others; last,
  // so that it is joined before anything it writes goes.
  std::vector<std::future<std::uint64_t>> fills_;
};

}  // namespace mosaic::cpu
