// The CUDA backend made: where each non-expert weight sits in a set buffer, the device's memory laid
// out for the runtime's shape (expert slots, resident-set buffers, streams, cuBLAS), and the GEMV or
// GEMM a projection runs through. What fills that memory is cuda_copies.cpp; what grows with the
// steps (KV blocks, the workspace, the reroute tables) is cuda_memory.cpp.
#include "runtime/cuda/cuda_backend.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/launch.h"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"
#include "kernels/transformer_ops.h"
#include "model/weight_names.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/cuda_probe.h"

namespace mosaic::cuda {
namespace {

constexpr std::int64_t kAlign = 128;  // elements: bf16 tensors start 256-byte aligned

SetLayout set_layout(const HostStore& store) {
  const ModelSpec& s = store.spec();
  SetLayout out;
  std::unordered_map<std::string, std::int64_t> at;
  const auto& names = store.non_expert_names();
  const WeightNames n(s);
  std::unordered_map<std::string, bool> fp32;
  if (s.router_bias)
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      if (s.is_sparse(l)) fp32.emplace(n.router_bias(l), true);
  for (std::size_t i = 0; i < names.size(); ++i) {
    out.offset.push_back(out.elements);
    out.fp32.push_back(fp32.contains(names[i]));
    at.emplace(names[i], out.elements);
    const std::int64_t values = store.tensor(store.set_tensors(0)[i]).numel(), elements = out.fp32.back() ? 2 * values : values;
    out.elements += (elements + kAlign - 1) / kAlign * kAlign;
  }
  auto off = [&](const std::string& name) {
    const auto it = at.find(name);
    if (it == at.end()) throw MissingError("host store", name, "is not among the non-expert tensors");
    return it->second;
  };
  out.embed = off(n.embed());
  out.final_norm = off(n.final_norm());
  out.lm_head = off(n.lm_head());
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    LayerOffsets L;
    L.input_norm = off(n.input_norm(l));
    L.post_norm = off(n.post_norm(l));
    L.wo = off(n.attn(l, AttnPart::O));
    if (s.o_bias) L.bo = off(n.attn(l, AttnPart::O, true));
    if (s.mla) {
      if (s.mla->q_lora_rank > 0) {
        L.wq_a = off(n.mla(l, MlaPart::QA));
        if (s.qkv_bias) L.bq_a = off(n.mla(l, MlaPart::QA, true));
        L.q_a_norm = off(n.mla(l, MlaPart::QANorm));
        L.wq_b = off(n.mla(l, MlaPart::QB));
      } else {
        L.wq = off(n.mla(l, MlaPart::Q));
      }
      L.wkv_a = off(n.mla(l, MlaPart::KVA));
      if (s.qkv_bias) L.bkv_a = off(n.mla(l, MlaPart::KVA, true));
      L.kv_a_norm = off(n.mla(l, MlaPart::KVANorm));
      L.wkv_b = off(n.mla(l, MlaPart::KVB));
    } else {
      L.wq = off(n.attn(l, AttnPart::Q));
      L.wk = off(n.attn(l, AttnPart::K));
      L.wv = off(n.attn(l, AttnPart::V));
    }
    if (s.qkv_bias && !s.mla) {
      L.bq = off(n.attn(l, AttnPart::Q, true));
      L.bk = off(n.attn(l, AttnPart::K, true));
      L.bv = off(n.attn(l, AttnPart::V, true));
    }
    if (s.qk_norm != QkNorm::None) {
      L.q_norm = off(n.q_norm(l));
      L.k_norm = off(n.k_norm(l));
    }
    if (s.is_sparse(l)) {
      L.router = off(n.router(l));
      if (s.router_bias) L.router_bias = off(n.router_bias(l));
      if (s.shared_expert_intermediate > 0) {
        L.mlp_gate = off(n.shared_expert(l, ExpertRole::Gate));
        L.mlp_up = off(n.shared_expert(l, ExpertRole::Up));
        L.mlp_down = off(n.shared_expert(l, ExpertRole::Down));
        if (s.shared_expert_gated) L.shared_gate = off(n.shared_expert_gate(l));  // DeepSeek adds its shared experts ungated
      }
    } else {
      L.mlp_gate = off(n.dense_mlp(l, ExpertRole::Gate));
      L.mlp_up = off(n.dense_mlp(l, ExpertRole::Up));
      L.mlp_down = off(n.dense_mlp(l, ExpertRole::Down));
    }
    out.layers.push_back(L);
  }
  return out;
}

}  // namespace

CudaBackend::CudaBackend(const HostStore& store, const BackendShape& shape)
    : store_(store), spec_(store.spec()), shape_(shape) {
  if (const auto why = cuda_unsupported(spec_)) throw UnsupportedError("device cuda", "", *why, "serve it with --device cpu");
  if (const auto why = unavailable()) throw DeviceError("device cuda", "", *why, "use --device cpu on this machine");
  const ModelSpec& s = spec_;
  MOSAIC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MOSAIC_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  MOSAIC_CUDA_CHECK(cudaStreamCreateWithFlags(&fill_, cudaStreamNonBlocking));
  MOSAIC_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  MOSAIC_CUDA_CHECK(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming));
  MOSAIC_CUDA_CHECK(cudaEventCreateWithFlags(&prefetched_, cudaEventDisableTiming));
  MOSAIC_CUDA_CHECK(cudaEventCreateWithFlags(&behind_, cudaEventDisableTiming));
  MOSAIC_CUDA_CHECK(cublas().create(&cublas_));
  MOSAIC_CUDA_CHECK(cublas().set_stream(cublas_, stream_));
  // Every distinct host byte in pinned memory when the host tier holds them all in RAM (the family
  // fits); otherwise each copy streams through a ring of pinned staging chunks from the tier, which
  // reads what is not resident from disk.
  if (!store.tier().budget()) {
    mirror_ = PinnedMirror::of(store);
  } else {
    if (store.deltas() > 0)
      throw UnsupportedError("host budget", "", "is not implemented on CUDA for delta folders yet (their packs are mirrored whole)",
                             "serve them without --host-budget, or on --device cpu");
    for (StagingChunk& c : ring_) {
      c.host.resize(HostTier::kChunk);
      MOSAIC_CUDA_CHECK(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    }
  }
  inv_freq_ = inverse_frequencies(s);

  slot_elements_ = 3 * s.expert_intermediate * s.hidden_size;
  const auto slot_bytes = static_cast<std::size_t>(slot_elements_) * sizeof(bf16_t);
  MOSAIC_CUDA_CHECK(cudaGetDevice(&device_));
  const int device = device_;
  // Virtual memory where the driver and device take it, unless the options say no; yes insists (an
  // error naming what is missing rather than plain allocations).
  std::vector<std::int64_t> dense = shape.layer_slots;  // [layers]: slots with matrices of their own
  for (std::size_t l = 0; l < dense.size() && l < shape.layer_delta_only.size(); ++l) dense[l] -= shape.layer_delta_only[l].second;
  const CudaOptions& options = shape.cuda;
  if (options.virtual_memory.value_or(PhysicalPages::supported(device))) {
    const std::uint64_t page = PhysicalPages::page_bytes(device);
    std::int64_t pages = 0;  // as many as every slot full needs: the budget already priced them
    for (std::int64_t n : dense) pages += PageMap(slot_bytes, n, page).pages();
    pages_ = std::make_unique<PhysicalPages>(device, pages);
    for (std::int64_t n : dense) virtual_slots_.push_back(std::make_unique<VirtualTensor>(*pages_, slot_bytes, n));
  } else {
    for (std::int64_t n : dense) slots_.emplace_back(static_cast<std::size_t>(n) * slot_bytes);
  }
  scratch_slots_.resize(static_cast<std::size_t>(shape.scratch_slots) * slot_bytes);
  for (std::int64_t n : shape.layer_slots) records_.emplace_back(static_cast<std::size_t>(n));
  scratch_records_.resize(static_cast<std::size_t>(shape.scratch_slots));

  layout_ = set_layout(store);
  for (int b = 0; b < shape.buffers; ++b) {
    sets_.emplace_back(static_cast<std::size_t>(layout_.elements) * sizeof(bf16_t));
    held_.emplace_back(store.non_expert_names().size(), -1);
    MOSAIC_CUDA_CHECK(cudaEventCreateWithFlags(&filled_.emplace_back(), cudaEventDisableTiming));
  }
  const auto importance_bytes = static_cast<std::size_t>(s.num_layers * store.targets() * s.num_experts) * sizeof(float);
  importance_.resize(importance_bytes);
  importance_host_.resize(importance_bytes);
  tables_.resize(static_cast<std::size_t>(s.num_layers));
  uploaded_.resize(static_cast<std::size_t>(s.num_layers));
  for (std::int64_t l = 0; l < s.num_layers; ++l)
    if (s.is_sparse(l)) tables_[static_cast<std::size_t>(l)].resize(static_cast<std::size_t>(store.targets() * s.num_experts) * sizeof(std::int32_t));
  k_.resize(static_cast<std::size_t>(s.num_layers));
  v_.resize(static_cast<std::size_t>(s.num_layers));
  for (std::int64_t i = 0; i < 3 * s.num_layers; ++i) MOSAIC_CUDA_CHECK(cudaEventCreate(&layer_marks_.emplace_back()));
  if (shape.kv_blocks) reserve_kv(*shape.kv_blocks);
  graphs_enabled_ = options.graphs;
  tiled_attention_ = options.tiled_attention;
  prepared_draws_ = options.prepared_draws;
  fused_ = options.fused;
  layer_times_ = options.layer_times;
  l2_prefetch_ = options.l2_prefetch;
  if (options.device_route_pairs < 0 || options.device_route_pairs > kernels::kRouteMaxPairs)
    throw InvalidArgument("device cuda", "device_route_pairs " + std::to_string(options.device_route_pairs),
                          "must be from 0 to " + std::to_string(kernels::kRouteMaxPairs) + ", what one routing launch holds");
  device_route_pairs_ = options.device_route_pairs;
  tensor_core_experts_ =
      options.tensor_core_experts && kernels::tensor_core_shapes(static_cast<int>(s.hidden_size), static_cast<int>(s.expert_intermediate));
  tensor_core_attention_ = options.tensor_core_attention;  // paged_attention_cuda takes it where the head size allows
  int l2 = 0;
  MOSAIC_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_));
  l2_bytes_ = static_cast<std::size_t>(l2);
  // Programmatic dependent launches (kernels/launch.h): on wherever the device and the kernels allow
  // them (the H100's graph step, 2026-11-28: 0.517 ms against 0.539). The options (or MOSAIC_CUDA_PDL)
  // turn them off, or insist: refused where they cannot run. Process-wide: the backend made last decides.
  const bool insisted = options.programmatic_launches.value_or(false);
  const bool programmatic = options.programmatic_launches.value_or(kernels::programmatic_launches_possible());
  if (insisted && !kernels::programmatic_launches_possible())
    throw DeviceError("device cuda", "programmatic launches (CudaOptions, or MOSAIC_CUDA_PDL=1)",
                      "need a GPU of compute capability 9.0 or later and kernels compiled for it (CMAKE_CUDA_ARCHITECTURES 90)",
                      "leave them to the default, or unset MOSAIC_CUDA_PDL");
  kernels::set_programmatic_launches(programmatic);
  if (fused_) {
    attention_split_.resize(kernels::attention_split_bytes(static_cast<int>(s.head_dim)));
    if (attention_split_.bytes()) MOSAIC_CUDA_CHECK(cudaMemsetAsync(attention_split_.get(), 0, attention_split_.bytes(), stream_));
    tail_counters_.resize(2 * sizeof(unsigned));
    MOSAIC_CUDA_CHECK(cudaMemsetAsync(tail_counters_.get(), 0, tail_counters_.bytes(), stream_));
  }
  MOSAIC_CUDA_CHECK(kernels::paged_attention_cuda(nullptr, {}, 0, 1, 1, 1, 1, nullptr, nullptr, nullptr, false, stream_));  // configures it
}

CudaBackend::~CudaBackend() {
  // Buffers free after this (cudaFree waits for the device); the handles go first.
  if (stream_) cudaStreamSynchronize(stream_);
  if (copy_) cudaStreamSynchronize(copy_);
  if (fill_) cudaStreamSynchronize(fill_);
  for (cudaEvent_t e : filled_) cudaEventDestroy(e);
  for (cudaEvent_t e : layer_marks_) cudaEventDestroy(e);
  for (Graph& g : graphs_) cudaGraphExecDestroy(g.exec);
  if (cublas_) cublas().destroy(cublas_);
  for (StagingChunk& c : ring_)
    if (c.done) {
      cudaEventSynchronize(c.done);
      cudaEventDestroy(c.done);
    }
  if (copied_) cudaEventDestroy(copied_);
  if (computed_) cudaEventDestroy(computed_);
  if (prefetched_) cudaEventDestroy(prefetched_);
  if (behind_) cudaEventDestroy(behind_);
  if (stream_) cudaStreamDestroy(stream_);
  if (copy_) cudaStreamDestroy(copy_);
  if (fill_) cudaStreamDestroy(fill_);
}

// A tensor's stored bytes to `to` on the device: from the pinned mirror in one copy, or through the
// staging ring from the host tier, chunk by chunk (a chunk waits for its ring slot's last copy, is
// filled from the tier's bytes, then copied), so the host never holds more than the ring of them.
void CudaBackend::linear(const float* x, std::int64_t n, std::int64_t in, const bf16_t* w, std::int64_t out,
                         const bf16_t* bias, bool accumulate, float* y) {
  if (n == 0) return;
  if (n <= kGemvRows) {
    MOSAIC_CUDA_CHECK(kernels::linear_cuda(x, static_cast<int>(n), static_cast<int>(in), w, static_cast<int>(out), bias,
                                           accumulate, y, stream_));
    return;
  }
  // Many rows: compute-bound, so cuBLAS on bf16 copies of the activations (fp32 accumulation).
  MOSAIC_CUDA_CHECK(kernels::float_to_bf16_cuda(x, n * in, work_.narrow, stream_));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  MOSAIC_CUDA_CHECK(cublas().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(n),
                                 static_cast<int>(in), &alpha, w, CUDA_R_16BF, static_cast<int>(in), work_.narrow,
                                 CUDA_R_16BF, static_cast<int>(in), &beta, y, CUDA_R_32F, static_cast<int>(out),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) MOSAIC_CUDA_CHECK(kernels::add_bias_cuda(y, bias, static_cast<int>(n), static_cast<int>(out), stream_));
}

}  // namespace mosaic::cuda

namespace mosaic {

std::unique_ptr<Backend> make_cuda_backend(const HostStore& store, const BackendShape& shape) {
  return std::make_unique<cuda::CudaBackend>(store, shape);
}

}  // namespace mosaic
