#pragma once
// Internal: the CUDA backend. bf16 weights — expert slots per layer and a scratch pool, K resident-set
// buffers of non-expert weights — fp32 activations and paged bf16 keys and values, on one stream,
// with host-to-device copies on a second. Include only from this folder's .cpp files.
#include <array>
#include <mutex>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/delta_linear.h"
#include "kernels/moe_experts.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/grouped_plan.h"
#include "runtime/cuda/pinned_mirror.h"
#include "runtime/cuda/step_inputs.h"
#include "runtime/cuda/virtual_memory.h"

namespace mosaic::cuda {

using kernels::bf16_t;

// Decode steps replayed from CUDA graphs (cuda_graph.cpp): up to kGraphTokens sequences, their
// attention launched for kGraphPositions positions (its shared memory fixed for the graph).
constexpr std::int64_t kGraphTokens = 8;
constexpr int kGraphPositions = 4096;

// Where each non-expert weight sits in a set buffer (element offsets; −1: the model has none).
struct LayerOffsets {
  std::int64_t input_norm = -1, post_norm = -1, wq = -1, wk = -1, wv = -1, wo = -1, bq = -1, bk = -1, bv = -1, bo = -1;
  std::int64_t q_norm = -1, k_norm = -1, router = -1;
  std::int64_t mlp_gate = -1, mlp_up = -1, mlp_down = -1, shared_gate = -1;  // dense MLP or shared expert(s)
  std::int64_t router_bias = -1;  // DeepSeek-V3's e_score_correction_bias, held in fp32 (SetLayout::fp32)
  // DeepSeek's latent attention: q_proj (wq) or q_a_proj → q_a_layernorm → q_b_proj; kv_a_proj_with_mqa
  // → kv_a_layernorm; kv_b_proj (W_UK and W_UV); o_proj (wo).
  std::int64_t wq_a = -1, bq_a = -1, q_a_norm = -1, wq_b = -1, wkv_a = -1, bkv_a = -1, kv_a_norm = -1, wkv_b = -1;
};
struct SetLayout {
  std::vector<std::int64_t> offset;  // [non-expert names]
  // [non-expert names]: held as fp32 (two bf16 elements a value), where bf16 would move a choice: the
  // router's correction bias steers which experts are chosen by margins finer than bf16's.
  std::vector<bool> fp32;
  std::int64_t elements = 0;
  std::int64_t embed = -1, final_norm = -1, lm_head = -1;
  std::vector<LayerOffsets> layers;
};

// What an expert slot holds. A delta folder's expert adds its packed Δ (in the slot's delta room)
// over dense matrices: its base's, copied into the slot, or — in a delta-only slot — read from the
// layer's slot that holds the base (DeltaMoE: the base's bytes once on the device).
struct SlotRecord {
  ExpertId expert = -1;
  std::int32_t dense = -1;  // the slot whose matrices serve this one's dense part
  bool has_delta = false;
  std::array<kernels::DeltaView, 3> delta{};  // gate, up, down, in `room`
  // Grown to the largest delta block the slot has held (delta_block.h): a slot that only ever holds
  // dense experts costs nothing beyond the budget's byte model, one that holds a delta its packed
  // bytes and under 3 KB of alignment.
  DeviceBuffer room;
};

// One step's device scratch, carved from one allocation that grows to the largest step seen.
struct Workspace {
  float *x, *h, *q, *k, *v, *attn, *mlp, *mlp2, *gate, *router, *topk_w, *act, *pair_out, *logits;
  float* gathered;  // [pairs, hidden] fp32: a delta bundle's activations (one row when the family has no deltas)
  // Latent attention (one element each without it): q_a_proj's output [tokens, q_lora_rank], the
  // absorbed queries [tokens, heads, rank + rope] and the attention's latent output [tokens, heads, rank].
  float *q_low, *latent_q, *latent_out;
  std::int32_t *topk_ids;  // [layers][tokens · k]: kept for the host's bookkeeping after the step
  std::int32_t* predicted_ids;  // [tokens · k]: the next MoE layer's top-k over this layer's input (prefetch)
  float* predicted_w;
  std::int32_t* unmasked_ids;  // [tokens · k]: the router's choice with every expert resident (SwapMoE's importance)
  float* unmasked_w;
  bf16_t* narrow;          // bf16 copies of activations for cuBLAS
  int* reroute_scratch;
  kernels::GroupedPairs groups;
  std::int32_t* group_counts;  // [waves]
  std::byte* draws;            // the prepared draws of the wanted rows (draw_layout)
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const HostStore& store, const BackendShape& shape);
  ~CudaBackend() override;

  TierRead load_expert(std::int64_t layer, SlotRef slot, ExpertId expert) override;
  std::uint64_t load_set(int buffer, int set) override;
  std::uint64_t start_set(int buffer, int set) override;
  bool set_ready(int buffer) override;
  void wait_set(int buffer) override;
  StepResult run(const StepBatch& batch, MoeState& moe) override;
  // Virtual experts' updates: queued on the copy stream behind the steps, landed when its event is.
  TierRead copy_behind(std::int64_t layer, SlotRef slot, ExpertId expert) override;
  bool copies_landed() override;
  bool queues_copies() const override { return true; }
  void await_copies() override;

 private:
  // Copies, converting to bf16 through `staging`, on `stream`: expert loads on the copy stream, set
  // fills on their own, so that a miss's load does not queue behind a look-ahead fill.
  TierRead copy_tensor(TensorId id, bf16_t* to, cudaStream_t stream, DeviceBuffer& staging);
  // The same into fp32 (SetLayout::fp32): an fp32 tensor as it is, a bf16 or f16 one widened.
  TierRead copy_tensor_fp32(TensorId id, float* to, cudaStream_t stream, DeviceBuffer& staging);
  TierRead upload(TensorId id, std::byte* to, cudaStream_t stream);
  // Issues the copies of host-store expert `expert` into `slot` of `layer` on the copy stream, mapping
  // its pages first; returns the host bytes they read. Nothing waits for them here.
  TierRead issue_expert_copy(std::int64_t layer, SlotRef slot, ExpertId expert);
  void copies_done();  // the compute stream waits on what the copy stream has issued
  void reserve_kv(std::int64_t blocks);
  void reserve_workspace(std::int64_t tokens, std::int64_t wanted);
  void upload_tables(const MoeState& moe);
  void upload_table(std::size_t layer, const RerouteTable& table);

  // The prefetch policy (cuda_prefetch.cpp). predict: the router of MoE layer `next` over the current
  // layer's input, its top-k copied back with the stream's next host wait. prefetch: after that
  // wait, the loads plan_prefetch chose, issued on the copy stream without waiting. await_prefetch:
  // before `layer`'s experts run, its prefetches are waited for — by the host when it has just
  // waited for the layer's top-k (the time is charged as prefetch_seconds), else by the stream.
  void predict(std::int64_t next, const StepInputs& in);
  void prefetch(std::int64_t next, const StepInputs& in, MoeState& state, StepResult& result);
  void await_prefetch(std::int64_t layer, const StepInputs& in, StepResult& result, bool host_waited);

  // y [n, out] (+)= x [n, in] · Wᵀ (+ b): the memory-bound kernel up to kGemvRows rows, cuBLAS beyond.
  static constexpr std::int64_t kGemvRows = 8;
  void linear(const float* x, std::int64_t n, std::int64_t in, const bf16_t* w, std::int64_t out, const bf16_t* bias,
              bool accumulate, float* y);
  // The device work of a step, embeddings to the logits and top-k copied back; with no host wait
  // when every MoE layer routes on the device, which is what a CUDA graph captures.
  void forward(const StepInputs& in, MoeState& state, StepResult& result, int attention_positions);
  // A step of one token alone (a request decoding by itself, Multi-MoE's Table 1): events around each
  // MoE layer's attention and expert block, recorded by mark() and read by time_layers_alone() after
  // the step's last wait, as the CPU backend times them with its clock.
  void mark(std::int64_t layer, int point);
  void time_layers_alone(const StepInputs& in, StepResult& result) const;
  // Wanted row `row`'s draw as the step prepared it (draws_host_, laid out by `d`), its whole row
  // fetched from the workspace on demand.
  TokenCandidates prepared_draw(const DrawLayout& d, std::int64_t row, double temperature) const;
  // Decode steps of few tokens whose every MoE layer routes on the device are replayed from a CUDA
  // graph per shape (tokens, and the token groups of each buffer): ~20 launches a layer become one.
  bool graphable(const StepInputs& in, const MoeState& state) const;
  void run_graph(StepInputs& in, MoeState& state, StepResult& result);
  void drop_graphs();
  // A SwiGLU MLP of a set buffer (a dense layer's, or the shared expert) over n rows of h:
  // out (+)= down(silu(gate·h) ∘ (up·h)), with gate, up and down at their set offsets.
  void swiglu(int buffer, const LayerOffsets& L, std::int64_t width, const float* h, std::int64_t n, bool accumulate, float* out);
  // DeepSeek's latent attention of `layer` over every token (cuda_latent.cpp): each group's input norm
  // and projections, its latents written to the cache, its queries absorbed; the attention over the
  // cache; each group's values out through W_UV into w.attn [tokens, heads · v], for o_proj.
  void latent_attention(std::int64_t layer, const StepInputs& in);
  // The router of `layer` over w.router [tokens, experts] into ids and weights, by the model's rule
  // (router_topk for the plain softmax, router_choice for DeepSeek's) — its resident set's bias read
  // from `buffer`. Masks first where the policy masks the router.
  void choose_experts(std::int64_t layer, const StepInputs& in, bool masks, std::int32_t* ids, float* weights);
  // SwapMoE's importance of `layer` in this step (MoeState::importance set): the unmasked choice over
  // w.router, and each pair's ‖h‖ · g added on the device into importance_ (kernels::importance_add_cuda).
  void add_importance(std::int64_t layer, const StepInputs& in);
  // After the step's last wait: what the step added, into the host's ExpertImportance (‖E‖ there).
  void read_importance(MoeState& state) const;
  // The MoE block of `layer` over every token: x += experts(h) (+ the shared expert). `on_device`:
  // routable_on_device(layer, …), as forward() found it just before. `project`: the attention's
  // output projection (w.attn into x) is still to be made, in the routing launch (norm_routes).
  void moe(std::int64_t layer, const StepInputs& in, MoeState& state, StepResult& result, bool on_device, bool project);
  // A layer whose pairs all hit (or whose router is masked): routed on the device, no host round trip.
  bool routable_on_device(std::int64_t layer, const StepInputs& in, const MoeState& state) const;
  // A step whose layers routed on the device make their post-attention norm, router and routing in
  // one launch (kernels::norm_route_cuda; one set's rows, few pairs, a small router), so forward()
  // leaves those layers' norm to moe().
  bool norm_routes(const StepInputs& in) const;
  // `next` ≥ 0: that layer's prefetch is issued once this layer's own loads are in.
  void route_on_host(std::int64_t layer, const StepInputs& in, MoeState& state, StepResult& result, std::int64_t next);
  // The grouped SwiGLU over device-described groups: on tensor cores, or on CUDA cores in fp32.
  void run_grouped(const kernels::GroupedPairs& g, int max_groups, bool tensor_cores);
  // The SwiGLU of the dense matrices `wt` over positions [begin, end) through cuBLAS; each group of
  // `deltas` marked delta adds its slot's packed Δ over its own positions (DeltaMoE's decoupled
  // compute: the base's GEMMs once for every group over it).
  void cublas_experts(std::int64_t layer, const bf16_t* wt, std::int32_t begin, std::int32_t end, std::span<const PlannedGroup> deltas);

  // The host's routing plan of `layer` from its top-k `ids` [tokens · k] (slot use times, table
  // updates, loads to make), its hits and misses added to the result's counts and its routes traced
  // where a chunk asked: moe_waves.h's plan_moe_layer, as every backend plans.
  RoutePlan plan_on_host(std::int64_t layer, const std::int32_t* ids, const StepInputs& in, MoeState& state, StepResult& result);

  const bf16_t* weight(int buffer, std::int64_t offset) const {
    return offset < 0 ? nullptr : sets_[static_cast<std::size_t>(buffer)].get<bf16_t>() + offset;
  }
  const float* weight_fp32(int buffer, std::int64_t offset) const {  // a SetLayout::fp32 tensor
    return reinterpret_cast<const float*>(weight(buffer, offset));
  }
  // A slot's own dense matrices: a layer's delta-only slots have none, so the slots after them sit
  // that many places earlier in the layer's tensor (as the CPU backend lays them out).
  bf16_t* slot_weights(std::int64_t layer, SlotRef slot) const;
  std::int64_t dense_position(std::int64_t layer, std::int32_t slot) const;
  bool has_delta_only(std::int64_t layer) const;
  bool is_delta_only(std::int64_t layer, SlotRef slot) const;  // as shape_.layer_delta_only places them
  const bf16_t* dense_weights(std::int64_t layer, SlotRef slot);  // the matrices a slot's expert computes with
  SlotRecord& record(std::int64_t layer, SlotRef slot);
  bf16_t* layer_slots(std::int64_t layer) const;  // a layer's slots, end to end
  void occupy(std::int64_t layer, SlotRef slot);   // before an expert is copied into the slot

  const HostStore& store_;
  const ModelSpec& spec_;
  BackendShape shape_;
  std::shared_ptr<const PinnedMirror> mirror_;  // null under a host budget: copies go through ring_
  struct StagingChunk {
    PinnedBuffer host;
    cudaEvent_t done = nullptr;
  };
  std::array<StagingChunk, 2> ring_;
  std::size_t ring_next_ = 0;
  std::mutex ring_m_;
  int device_ = 0;  // the GPU the backend was made on: a prepared draw's row is fetched from it on any thread
  cudaStream_t stream_ = nullptr, copy_ = nullptr, fill_ = nullptr;
  std::vector<cudaEvent_t> filled_;  // [buffers]: recorded after a set fill's last copy
  cudaEvent_t copied_ = nullptr, computed_ = nullptr, prefetched_ = nullptr;
  cudaEvent_t behind_ = nullptr;  // after the last copy_behind
  // SwapMoE's importance (MoeState::importance): a step's sums of ‖h‖ · g per [layer, target, expert],
  // zeroed before the step and copied back with its logits (no wait of its own); norm_routes is then
  // off, as the routing launch masks the logits the importance reads.
  bool measures_importance_ = false;
  DeviceBuffer importance_;
  PinnedBuffer importance_host_;
  std::vector<cudaEvent_t> layer_marks_;  // [layers][3]: layer start, expert block start, its end
  cublasHandle_t cublas_ = nullptr;

  std::int64_t slot_elements_ = 0;  // 3 · I · H
  std::vector<DeviceBuffer> slots_;  // [layers]
  // Where the driver takes it, the layers' slots on virtual memory instead (ExpertWeave's virtual
  // weight tensor), pages mapped as slots fill; CudaOptions::virtual_memory false keeps plain allocations. Both ways
  // match the CPU (tst_cuda_backend) and ran bench-cuda alike on the H100 (loads 0.96 vs 0.97 of peak).
  std::unique_ptr<PhysicalPages> pages_;
  std::vector<std::unique_ptr<VirtualTensor>> virtual_slots_;  // [layers]; destroyed before pages_
  DeviceBuffer scratch_slots_;
  std::vector<std::vector<SlotRecord>> records_;  // [layers][slots]
  std::vector<SlotRecord> scratch_records_;
  SetLayout layout_;
  std::vector<DeviceBuffer> sets_;  // [buffers]
  std::vector<std::vector<TensorId>> held_;  // [buffers][names]
  DeviceBuffer staging_, fill_staging_;  // a non-bf16 tensor on its way to conversion (copy_, fill_)

  std::vector<DeviceBuffer> tables_;                 // [layers]: [targets, experts] int32
  std::vector<std::vector<std::int32_t>> uploaded_;  // what each device table holds
  // [layers]: [blocks · block_tokens, kvh, hd] bf16; under latent attention k_ holds the latent
  // rows [blocks · block_tokens, rank + rope] and v_ nothing.
  std::vector<DeviceBuffer> k_, v_;
  std::int64_t kv_blocks_ = 0;

  DeviceBuffer work_buffer_;
  Workspace work_{};
  std::int64_t work_tokens_ = 0, work_wanted_ = 0;
  DeviceBuffer inputs_;             // the step's inputs (StepInputs), uploaded at once
  PinnedBuffer inputs_host_, logits_host_, ids_host_, plan_host_, predicted_host_, draws_host_;
  std::int64_t prefetch_layer_ = -1;          // the layer whose prefetch is in flight (one at a time)
  std::vector<std::int64_t> prefetch_pairs_;  // its loads' predicted pairs, charged its wait
  std::vector<float> inv_freq_;
  std::vector<bool> routed_on_device_;  // [layers], this step

  struct Graph {
    std::vector<std::int64_t> shape;
    cudaGraphExec_t exec = nullptr;
  };
  // On unless CudaOptions::graphs is off (tst_cuda_backend checks both ways against the CPU; on the H100 a
  // batch-1 decode step took 2.42 ms replayed against 2.70 ms launched kernel by kernel).
  bool graphs_enabled_ = true;
  std::vector<Graph> graphs_;   // dropped whenever a buffer they point into moves
  // Prompt tiles attended by the tiled kernel (kernels/paged_attention.h) unless
  // CudaOptions::tiled_attention off (tst_cuda_backend checks both ways against the CPU; on the H100 a
  // 2048-token prefill took 19.9 ms tiled against 55.4 ms token by token).
  bool tiled_attention_ = true;
  // Rows to be drawn from come back as their draws' candidates (kernels/token_candidates.h) unless
  // CudaOptions::prepared_draws off, which returns them whole: tst_cuda_backend checks both take the same tokens.
  bool prepared_draws_ = true;
  // A decode step's small kernels fused (the input norm, q, k and v, rotary and the cache write in one
  // launch; the output projection, the post-attention norm, router, mask, top-k and reroute in
  // another; for one token, the down projection with the combine), and its attention split over
  // positions (kernels::AttentionSplit, in attention_split_), unless CudaOptions::fused is off, which
  // launches them one by one and unsplit: tst_cuda_backend checks both ways against the CPU,
  // bench-cuda times both.
  bool fused_ = true;
  DeviceBuffer attention_split_;  // zeroed once: the kernel leaves its counters zero
  // A step of one token alone times its MoE layers (time_layers_alone) unless
  // CudaOptions::layer_times off: in a graph each mark is a node of its own, and a kernel after one
  // starts in plain stream order, not programmatically. bench-cuda times the step both ways.
  bool layer_times_ = true;
  // A decode step's latency-bound kernels ask the L2 for the weights the next kernels read
  // (kernels/l2_prefetch.h: the attention for the output projection's, a lone token's down projection
  // for the next layer's q, k and v) unless CudaOptions::l2_prefetch is off. bench-cuda times both.
  bool l2_prefetch_ = true;
  // CudaOptions::device_route_pairs and tensor_core_experts (where the widths allow: multiples of 16).
  std::int64_t device_route_pairs_ = 64;
  bool tensor_core_experts_ = false;
  bool tensor_core_attention_ = false;  // CudaOptions::tensor_core_attention
  std::size_t l2_bytes_ = 0;  // the device's L2: a prefetch asks for at most half of it
  // A group whose wanted rows are its tokens in order (a decode step's, up to kGemvRows): the head
  // reads x there with the final norm folded in (linear_parts_cuda's RowNorm), so the step gathers
  // and normalizes nothing. Part of a graph's shape: the rows are the step's, not the graph's.
  bool head_in_place(const StepInputs& in, const TokenGroup& g) const;
  // What the L2 is asked for ahead of `layer`'s output projection and of its q, k and v projections
  // (none where l2_prefetch_ is off, or past the last layer).
  kernels::L2Prefetch ahead_of_output(std::int64_t layer, const StepInputs& in) const;
  kernels::L2Prefetch ahead_of_qkv(std::int64_t layer, int buffer) const;
  // Zeroed once, left zero by the launches whose last block goes on (kernels' last_block_done):
  // [0] the q, k and v projections', [1] the output projection's.
  DeviceBuffer tail_counters_;
  unsigned* tail_counter(int i) const { return tail_counters_.get<unsigned>() + i; }
  std::uint64_t steps_ = 0;  // steps run: a prepared draw's row is fetched only before the next
  DeviceBuffer graph_inputs_;   // the inputs of graphed steps, at fixed offsets
};

}  // namespace mosaic::cuda
