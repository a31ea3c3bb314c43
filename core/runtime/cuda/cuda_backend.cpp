// The CUDA backend's memory: expert slots, resident-set buffers, KV blocks, the step workspace, and
// the copies that fill them from the pinned mirror of the host store.
#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "kernels/launch.h"
#include "kernels/linear.h"
#include "kernels/paged_attention.h"
#include "kernels/transformer_ops.h"
#include "model/weight_names.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/cuda/delta_block.h"

namespace mosaic::cuda {
namespace {

constexpr std::int64_t kAlign = 128;  // elements: bf16 tensors start 256-byte aligned

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

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
    const std::int64_t values = numel(store.tensor(store.set_tensors(0)[i]).shape), elements = out.fp32.back() ? 2 * values : values;
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
TierRead CudaBackend::upload(TensorId id, std::byte* to, cudaStream_t stream) {
  const HostTensor& t = store_.tensor(id);
  if (mirror_) {
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(to, mirror_->bytes(id), t.bytes.size(), cudaMemcpyHostToDevice, stream));
    return {t.bytes.size(), 0, 0};
  }
  std::lock_guard lock(ring_m_);  // the copy and fill streams, and a virtual-experts copy thread, share it
  return store_.read(id, [&](std::span<const std::byte> chunk, std::size_t offset) {
    for (std::size_t at = 0; at < chunk.size(); at += HostTier::kChunk) {
      StagingChunk& c = ring_[ring_next_++ % ring_.size()];
      MOSAIC_CUDA_CHECK(cudaEventSynchronize(c.done));  // its last copy has left it
      const std::size_t n = std::min(HostTier::kChunk, chunk.size() - at);
      std::memcpy(c.host.get(), chunk.data() + at, n);
      MOSAIC_CUDA_CHECK(cudaMemcpyAsync(to + offset + at, c.host.get(), n, cudaMemcpyHostToDevice, stream));
      MOSAIC_CUDA_CHECK(cudaEventRecord(c.done, stream));
    }
  });
}

TierRead CudaBackend::copy_tensor(TensorId id, bf16_t* to, cudaStream_t stream, DeviceBuffer& staging) {
  const HostTensor& t = store_.tensor(id);
  const auto n = numel(t.shape);
  TierRead r;
  switch (t.dtype) {
    case DType::BF16:
      r = upload(id, reinterpret_cast<std::byte*>(to), stream);
      break;
    case DType::F16:
    case DType::F32:
      // Converted on the device, from a staging copy: the link carries the checkpoint's own bytes.
      if (staging.bytes() < t.bytes.size()) {
        MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream));  // the stream may still read the smaller one
        staging.resize(t.bytes.size());
      }
      r = upload(id, staging.get<std::byte>(), stream);
      if (t.dtype == DType::F16) MOSAIC_CUDA_CHECK(kernels::half_to_bf16_cuda(staging.get<std::uint16_t>(), n, to, stream));
      else MOSAIC_CUDA_CHECK(kernels::float_to_bf16_cuda(staging.get<float>(), n, to, stream));
      break;
    default:
      throw UnsupportedError("host store", t.name, "is stored as " + std::string(dtype_name(t.dtype)) + ", which the CUDA backend does not load",
                             "convert the checkpoint to bf16, f16 or f32");
  }
  return r;
}

TierRead CudaBackend::copy_tensor_fp32(TensorId id, float* to, cudaStream_t stream, DeviceBuffer& staging) {
  const HostTensor& t = store_.tensor(id);
  const auto n = numel(t.shape);
  if (t.dtype == DType::F32) return upload(id, reinterpret_cast<std::byte*>(to), stream);
  if (t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw UnsupportedError("host store", t.name, "is stored as " + std::string(dtype_name(t.dtype)) + ", which the CUDA backend does not load",
                           "convert the checkpoint to bf16, f16 or f32");
  if (staging.bytes() < t.bytes.size()) {
    MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream));  // the stream may still read the smaller one
    staging.resize(t.bytes.size());
  }
  const TierRead r = upload(id, staging.get<std::byte>(), stream);
  MOSAIC_CUDA_CHECK(kernels::widen_to_float_cuda(staging.get<std::uint16_t>(), n, t.dtype == DType::F16, to, stream));
  return r;
}

void CudaBackend::copies_done() {
  MOSAIC_CUDA_CHECK(cudaEventRecord(copied_, copy_));
  MOSAIC_CUDA_CHECK(cudaStreamWaitEvent(stream_, copied_, 0));
}

bf16_t* CudaBackend::layer_slots(std::int64_t layer) const {
  const auto l = static_cast<std::size_t>(layer);
  return virtual_slots_.empty() ? slots_[l].get<bf16_t>() : virtual_slots_[l]->base<bf16_t>();
}

bf16_t* CudaBackend::slot_weights(std::int64_t layer, SlotRef slot) const {
  if (slot.scratch) return scratch_slots_.get<bf16_t>() + static_cast<std::int64_t>(slot.slot) * slot_elements_;
  return layer_slots(layer) + dense_position(layer, slot.slot) * slot_elements_;
}

std::int64_t CudaBackend::dense_position(std::int64_t layer, std::int32_t slot) const {
  if (!has_delta_only(layer)) return slot;
  if (is_delta_only(layer, {false, slot})) throw std::logic_error("a delta-only slot has no dense matrices of its own");
  const auto [first, count] = shape_.layer_delta_only[static_cast<std::size_t>(layer)];
  return slot < first ? slot : slot - count;
}

bool CudaBackend::is_delta_only(std::int64_t layer, SlotRef slot) const {
  if (slot.scratch || !has_delta_only(layer)) return false;
  const auto [first, count] = shape_.layer_delta_only[static_cast<std::size_t>(layer)];
  return slot.slot >= first && slot.slot < first + count;
}

bool CudaBackend::has_delta_only(std::int64_t layer) const {
  const auto l = static_cast<std::size_t>(layer);
  return l < shape_.layer_delta_only.size() && shape_.layer_delta_only[l].second > 0;
}

const bf16_t* CudaBackend::dense_weights(std::int64_t layer, SlotRef slot) {
  const SlotRecord& r = record(layer, slot);
  return slot_weights(layer, {slot.scratch, r.dense >= 0 ? r.dense : slot.slot});
}

SlotRecord& CudaBackend::record(std::int64_t layer, SlotRef slot) {
  return slot.scratch ? scratch_records_[static_cast<std::size_t>(slot.slot)]
                      : records_[static_cast<std::size_t>(layer)][static_cast<std::size_t>(slot.slot)];
}

void CudaBackend::occupy(std::int64_t layer, SlotRef slot) {
  if (!slot.scratch && !virtual_slots_.empty()) virtual_slots_[static_cast<std::size_t>(layer)]->occupy(dense_position(layer, slot.slot));
}

TierRead CudaBackend::issue_expert_copy(std::int64_t layer, SlotRef slot, ExpertId expert) {
  const HostExpert& e = store_.expert_tensors(expert);
  SlotRecord& r = record(layer, slot);
  TierRead bytes;
  std::int32_t dense = slot.slot;
  if (is_delta_only(layer, slot)) {
    // The dense part is the base's, in another slot of the layer (the runtime pinned it first).
    const auto& held = records_[static_cast<std::size_t>(layer)];
    dense = -1;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(held.size()) && dense < 0; ++i)
      if (!is_delta_only(layer, {false, i}) && held[static_cast<std::size_t>(i)].expert == e.dense) dense = i;
    if (e.delta < 0 || dense < 0) throw std::logic_error("a delta-only slot loaded without its base pinned in the layer");
  } else {
    occupy(layer, slot);
    bf16_t* to = slot_weights(layer, slot);
    const std::int64_t IH = spec_.expert_intermediate * spec_.hidden_size;
    bytes += copy_tensor(e.gate, to, copy_, staging_);
    bytes += copy_tensor(e.up, to + IH, copy_, staging_);
    bytes += copy_tensor(e.down, to + 2 * IH, copy_, staging_);
  }
  if (e.delta >= 0) {
    // One copy: the pinned mirror holds each delta as one block.
    const DeltaBlock& b = mirror_->delta_block(e.delta);
    if (r.room.bytes() < b.bytes) {
      if (r.room.bytes()) {  // the steps and copies before may still read the smaller room
        MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
        MOSAIC_CUDA_CHECK(cudaStreamSynchronize(copy_));
      }
      r.room.resize(b.bytes);
    }
    MOSAIC_CUDA_CHECK(cudaMemcpyAsync(r.room.get(), mirror_->delta_bytes(e.delta), b.bytes, cudaMemcpyHostToDevice, copy_));
    r.delta = delta_block_views(store_.delta(e.delta), b, r.room.get<std::byte>());
    bytes.bytes += store_.delta(e.delta).bytes();
  }
  // Recorded once the copies are issued: a load that throws leaves the slot as it was recorded.
  r.expert = expert;
  r.dense = dense;
  r.has_delta = e.delta >= 0;
  return bytes;
}

TierRead CudaBackend::copy_behind(std::int64_t layer, SlotRef slot, ExpertId expert) {
  // Between steps (after_step), into a slot no table names until the update commits: the copy
  // stream carries it while the next steps compute.
  const TierRead bytes = issue_expert_copy(layer, slot, expert);
  MOSAIC_CUDA_CHECK(cudaEventRecord(behind_, copy_));
  return bytes;
}

bool CudaBackend::copies_landed() {
  const cudaError_t e = cudaEventQuery(behind_);
  if (e == cudaErrorNotReady) return false;
  MOSAIC_CUDA_CHECK(e);
  return true;
}

void CudaBackend::await_copies() { MOSAIC_CUDA_CHECK(cudaEventSynchronize(behind_)); }

TierRead CudaBackend::load_expert(std::int64_t layer, SlotRef slot, ExpertId expert) {
  const TierRead bytes = issue_expert_copy(layer, slot, expert);
  // Called between steps (pinning, whole-model swaps): done when it returns, so its time is real.
  MOSAIC_CUDA_CHECK(cudaStreamSynchronize(copy_));
  return bytes;
}

std::uint64_t CudaBackend::load_set(int buffer, int set) {
  const std::uint64_t bytes = start_set(buffer, set);
  wait_set(buffer);
  return bytes;
}

std::uint64_t CudaBackend::start_set(int buffer, int set) {
  std::vector<TensorId>& held = held_[static_cast<std::size_t>(buffer)];
  const std::vector<TensorId>& ids = store_.set_tensors(set);
  bf16_t* base = sets_[static_cast<std::size_t>(buffer)].get<bf16_t>();
  // The buffer may still be read by the steps before: copies start after them.
  MOSAIC_CUDA_CHECK(cudaEventRecord(computed_, stream_));
  MOSAIC_CUDA_CHECK(cudaStreamWaitEvent(fill_, computed_, 0));
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (held[i] == ids[i]) continue;  // the same tensor: nothing to copy
    bf16_t* to = base + layout_.offset[i];
    bytes += (layout_.fp32[i] ? copy_tensor_fp32(ids[i], reinterpret_cast<float*>(to), fill_, fill_staging_)
                              : copy_tensor(ids[i], to, fill_, fill_staging_)).bytes;
    held[i] = ids[i];
  }
  MOSAIC_CUDA_CHECK(cudaEventRecord(filled_[static_cast<std::size_t>(buffer)], fill_));
  return bytes;
}

bool CudaBackend::set_ready(int buffer) {
  const cudaError_t e = cudaEventQuery(filled_[static_cast<std::size_t>(buffer)]);
  if (e == cudaErrorNotReady) return false;
  MOSAIC_CUDA_CHECK(e);
  return true;
}

void CudaBackend::wait_set(int buffer) {
  // The host waits (the runtime times what a step waited); the compute stream is then ordered after.
  MOSAIC_CUDA_CHECK(cudaEventSynchronize(filled_[static_cast<std::size_t>(buffer)]));
}

void CudaBackend::reserve_kv(std::int64_t blocks) {
  if (blocks <= kv_blocks_) return;
  if (shape_.kv_blocks && blocks > *shape_.kv_blocks)
    throw InvalidArgument("step", "KV block " + std::to_string(blocks - 1),
                          "is beyond the " + std::to_string(*shape_.kv_blocks) + " blocks the budget holds");
  // Unlimited pools grow by doubling; a budgeted one is allocated whole at the start.
  const std::int64_t target = shape_.kv_blocks ? std::max(blocks, *shape_.kv_blocks) : std::max(blocks, 2 * kv_blocks_);
  // Latent attention caches one row of latent and rotary key per token, in k_ alone.
  const std::int64_t k_width = spec_.mla ? spec_.kv_cache_width() : spec_.kv_width(), v_width = spec_.mla ? 0 : spec_.kv_width();
  for (auto [pools, width] : {std::pair{&k_, k_width}, std::pair{&v_, v_width}})
    for (std::int64_t l = 0; l < spec_.num_layers && width > 0; ++l) {
      const auto row_bytes = static_cast<std::size_t>(width) * sizeof(bf16_t);
      const auto old_bytes = static_cast<std::size_t>(kv_blocks_ * shape_.kv_block_tokens) * row_bytes;
      DeviceBuffer grown(static_cast<std::size_t>(target * shape_.kv_block_tokens) * row_bytes);
      DeviceBuffer& old = (*pools)[static_cast<std::size_t>(l)];
      if (old_bytes) MOSAIC_CUDA_CHECK(cudaMemcpyAsync(grown.get(), old.get(), old_bytes, cudaMemcpyDeviceToDevice, stream_));
      MOSAIC_CUDA_CHECK(cudaStreamSynchronize(stream_));
      old = std::move(grown);
    }
  kv_blocks_ = target;
  drop_graphs();
}

void CudaBackend::reserve_workspace(std::int64_t tokens, std::int64_t wanted) {
  if (tokens <= work_tokens_ && wanted <= work_wanted_) return;
  tokens = std::max(tokens, work_tokens_);
  wanted = std::max(wanted, work_wanted_);
  const ModelSpec& s = spec_;
  const std::int64_t T = tokens, P = tokens * s.top_k, H = s.hidden_size, I = s.expert_intermediate;
  const std::int64_t mlp_width = std::max({s.dense_intermediate, s.shared_expert_intermediate, std::int64_t(1)});
  std::size_t at = 0;
  std::vector<std::pair<void**, std::size_t>> parts;
  auto part = [&](auto** p, std::int64_t count, std::size_t elem) { parts.emplace_back(reinterpret_cast<void**>(p), static_cast<std::size_t>(count) * elem); };
  part(&work_.x, T * H, 4);
  part(&work_.h, T * H, 4);
  part(&work_.q, T * s.q_width(), 4);
  part(&work_.k, T * (s.mla ? s.kv_cache_width() : s.kv_width()), 4);  // MLA: kv_a_proj's output
  part(&work_.v, s.mla ? 1 : T * s.kv_width(), 4);
  part(&work_.attn, T * std::max(s.q_width(), s.o_width()), 4);
  const kernels::LatentShape latent = s.mla ? latent_shape(s) : kernels::LatentShape{};
  part(&work_.q_low, s.mla ? T * std::max<std::int64_t>(s.mla->q_lora_rank, 1) : 1, 4);
  part(&work_.latent_q, s.mla ? T * latent.heads * latent.row() : 1, 4);
  part(&work_.latent_out, s.mla ? T * latent.heads * latent.rank : 1, 4);
  part(&work_.mlp, T * 2 * mlp_width, 4);
  part(&work_.mlp2, std::max(T * std::max(mlp_width, H), P * I), 4);  // also a large group's activations
  part(&work_.gate, T, 4);
  part(&work_.router, T * std::max<std::int64_t>(s.num_experts, 1), 4);
  part(&work_.topk_w, P, 4);
  part(&work_.act, P * std::max<std::int64_t>(2 * I, 1), 4);  // a large group's gate_up output, then its activations
  part(&work_.pair_out, P * H, 4);
  part(&work_.gathered, store_.deltas() > 0 ? P * H : 1, 4);
  part(&work_.logits, wanted * s.vocab_size, 4);
  part(&work_.topk_ids, s.num_layers * P, 4);
  part(&work_.predicted_ids, P, 4);
  part(&work_.predicted_w, P, 4);
  part(&work_.unmasked_ids, P, 4);
  part(&work_.unmasked_w, P, 4);
  part(&work_.narrow, std::max({T * std::max({H, s.q_width(), s.o_width(), s.mla ? s.mla->q_lora_rank : 0, mlp_width}), P * std::max(H, I)}), 2);
  std::int64_t most_slots = shape_.scratch_slots;
  for (std::int64_t n : shape_.layer_slots) most_slots = std::max(most_slots, n);
  part(&work_.reroute_scratch, 2 * most_slots + 1, 4);
  part(&work_.groups.groups, 1, 4);
  part(&work_.groups.misses, 1, 4);
  part(&work_.groups.begin, P + 1, 4);
  part(&work_.groups.end, P + 1, 4);
  part(&work_.groups.weights, P + 1, sizeof(void*));
  part(&work_.groups.pair_at, P + 1, 4);
  part(&work_.groups.pos_of, P + 1, 4);
  part(&work_.group_counts, P + 1, 4);
  part(&work_.draws, 1, draw_layout(wanted).bytes);
  for (auto& [p, bytes] : parts) at += (bytes + 255) / 256 * 256;
  work_buffer_.resize(at);
  at = 0;
  for (auto& [p, bytes] : parts) {
    *p = work_buffer_.get<std::byte>() + at;
    at += (bytes + 255) / 256 * 256;
  }
  logits_host_.resize(static_cast<std::size_t>(wanted * s.vocab_size) * sizeof(float));
  ids_host_.resize(static_cast<std::size_t>(s.num_layers * P) * sizeof(std::int32_t));
  draws_host_.resize(draw_layout(wanted).bytes);
  predicted_host_.resize(static_cast<std::size_t>(P) * sizeof(std::int32_t));
  // A host plan's arrays: pair_at, pos_of, per wave counts, and per group begin, end, weights.
  plan_host_.resize(static_cast<std::size_t>(P + 1) * (4 * sizeof(std::int32_t) + sizeof(void*) + sizeof(std::int32_t)));
  work_tokens_ = tokens;
  work_wanted_ = wanted;
  drop_graphs();
}

void CudaBackend::upload_tables(const MoeState& moe) {
  for (std::size_t l = 0; l < tables_.size(); ++l)
    if (moe.tables[l]) upload_table(l, *moe.tables[l]);
}

void CudaBackend::upload_table(std::size_t layer, const RerouteTable& table) {
  const std::vector<std::int32_t>& data = table.data();
  if (data == uploaded_[layer]) return;
  uploaded_[layer] = data;
  MOSAIC_CUDA_CHECK(cudaMemcpyAsync(tables_[layer].get(), uploaded_[layer].data(), data.size() * sizeof(std::int32_t),
                                    cudaMemcpyHostToDevice, stream_));
}

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
