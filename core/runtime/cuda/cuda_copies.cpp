// The copies that fill the CUDA backend's memory from the pinned mirror of the host store: tensors
// (widened or narrowed to what the device holds), experts into slots (a delta's packed block into the
// slot's delta room), whole resident sets into their buffers, on the copy stream; and where a slot's
// matrices are.
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "kernels/transformer_ops.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/delta_block.h"

namespace mosaic::cuda {

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
  const auto n = t.numel();
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
  const auto n = t.numel();
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

}  // namespace mosaic::cuda
