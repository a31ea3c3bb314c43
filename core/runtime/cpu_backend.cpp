#include "runtime/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "common/error.h"
#include "common/huge_pages.h"
#include "model/dtype.h"
#include "runtime/cpu_ops.h"

namespace mosaic {

namespace cpu {
namespace {

// A host-store tensor copied into `out` (contiguous, as many elements, fp32 or the stored dtype)
// through the host tier: from RAM, or from disk a chunk at a time; converted where the dtypes differ.
TierRead fill_tensor(const HostStore& store, TensorId id, at::Tensor out) {
  const DType dtype = store.tensor(id).dtype;
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  at::Tensor flat = out.view({-1});  // `out` is contiguous (a slot, or a row block of one)
  return store.read(id, [&](std::span<const std::byte> chunk, std::size_t offset) {
    // ATen's copy: vectorized, and on every core (a load is on the critical path of its step).
    const auto n = static_cast<std::int64_t>(chunk.size()) / size;
    const at::Tensor from = at::from_blob(const_cast<std::byte*>(chunk.data()), {n}, at::TensorOptions().dtype(aten_type(dtype)));
    flat.narrow(0, static_cast<std::int64_t>(offset) / size, n).copy_(from);
  });
}

// Whether every routed expert's tensors are stored in bf16: only then can slots, which any of them
// may fill, hold bf16 without rounding one.
bool experts_bf16(const HostStore& store) {
  for (int e = 0; e < store.distinct_experts(); ++e) {
    const HostExpert& x = store.expert_tensors(e);
    for (TensorId t : {x.gate, x.up, x.down})
      if (t >= 0 && store.tensor(t).dtype != DType::BF16) return false;
  }
  return store.distinct_experts() > 0;
}

// The dtype a set buffer holds a non-expert tensor in: bf16 as stored where the step only ever
// multiplies by it through project() or looks rows up (matrices), fp32 otherwise (norms, biases,
// and latent attention's kv_b, which batched matmuls read as fp32).
at::ScalarType set_dtype(const HostTensor& t, const std::string& name, CpuWeights weights) {
  const bool matrix = t.shape.size() == 2 && !name.ends_with("kv_b_proj.weight");
  return weights == CpuWeights::Stored && t.dtype == DType::BF16 && matrix ? at::kBFloat16 : at::kFloat;
}

// Whether a tensor the backend wants in `want` can be read where the checkpoint maps it: stored in
// that dtype, and aligned for it (safetensors aligns data to 8 bytes; other files need not).
bool readable_in_place(const HostTensor& t, at::ScalarType want) {
  const bool kernel_dtype = t.dtype == DType::BF16 || t.dtype == DType::F32;
  return kernel_dtype && aten_type(t.dtype) == want && reinterpret_cast<std::uintptr_t>(t.bytes.data()) % dtype_size(t.dtype) == 0;
}

// CpuWeights::Mapped: the store's tensor itself where it can be read in place (a view of the mapped
// file, valid while the store is: a change of family re-points it, CpuBackend::rebase), else a copy
// in `want`, counted in `read`.
at::Tensor in_place_or_copy(const HostStore& store, TensorId id, at::ScalarType want, TierRead& read) {
  const HostTensor& t = store.tensor(id);
  if (readable_in_place(t, want))
    return at::from_blob(const_cast<std::byte*>(t.bytes.data()), t.shape, at::TensorOptions().dtype(want));
  at::Tensor copy = at::empty(t.shape, want);
  read += fill_tensor(store, id, copy);
  return copy;
}

// An expert tensor's dtype in a mapped slot: bf16 and fp32 as stored (the kernels read both), others fp32.
at::ScalarType mapped_expert_dtype(const HostTensor& t) { return t.dtype == DType::BF16 ? at::kBFloat16 : at::kFloat; }

// `n` slots of which [delta_only.first, + .second) hold a packed delta only; `in_place`: each slot
// holds its own tensors (CpuWeights::Mapped) instead of a row of the stacked ones.
ExpertSlots make_slots(const ModelSpec& s, std::int64_t n, at::ScalarType dtype, bool in_place,
                       std::pair<std::int64_t, std::int64_t> delta_only = {0, 0}) {
  const auto [first, count] = delta_only;
  ExpertSlots out;
  // Uninitialized: a slot is read only after a load.
  const std::int64_t stacked = in_place ? 0 : n - count;
  out.gate_up = at::empty({stacked, 2 * s.expert_intermediate, s.hidden_size}, dtype);
  out.down = at::empty({stacked, s.hidden_size, s.expert_intermediate}, dtype);
  if (in_place) out.in_place.resize(static_cast<std::size_t>(n - count));
  for (std::int64_t i = 0; i < n; ++i) {
    out.dense.push_back(i < first ? i : i < first + count ? -1 : i - count);
    out.delta_only.push_back(out.dense.back() < 0);
  }
  out.held.assign(static_cast<std::size_t>(n), -1);
  out.delta.resize(static_cast<std::size_t>(n));
  out.has_delta.assign(static_cast<std::size_t>(n), 0);
  return out;
}

}  // namespace

CpuBackend::CpuBackend(const HostStore& store, const BackendShape& shape) : store_(&store), shape_(shape) {
  const ModelSpec& s = store.spec();
  if (mapped() && store.tier().budget())
    throw InvalidArgument("--cpu-weights", "mapped", "reads every weight where its checkpoint is mapped, which a host budget pages out",
                          "serve without --host-budget, or with --cpu-weights stored");
  expert_dtype_ = shape.cpu_weights != CpuWeights::Fp32 && experts_bf16(store) ? at::kBFloat16 : at::kFloat;
  for (std::size_t l = 0; l < shape.layer_slots.size(); ++l)
    slots_.push_back(make_slots(s, shape.layer_slots[l], expert_dtype_, mapped(),
                                l < shape.layer_delta_only.size() ? shape.layer_delta_only[l] : std::pair<std::int64_t, std::int64_t>{}));
  scratch_ = make_slots(s, shape.scratch_slots, expert_dtype_, mapped());
  const auto& names = store.non_expert_names();
  for (std::size_t i = 0; i < names.size(); ++i) name_index_.emplace(names[i], i);
  buffers_.resize(static_cast<std::size_t>(shape.buffers));
  fills_.resize(static_cast<std::size_t>(shape.buffers));
  for (SetBuffer& b : buffers_) {
    b.held.assign(names.size(), -1);
    b.tensors.resize(names.size());
  }
  inv_freq_ = inverse_frequencies(s);
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    // Latent attention keeps one row a token: the latent and the rotated shared key; no values apart.
    k_.push_back(at::zeros({0, s.mla ? 1 : s.num_kv_heads, s.mla ? s.kv_cache_width() : s.head_dim}, at::kFloat));
    v_.push_back(at::zeros({0, s.mla ? 1 : s.num_kv_heads, s.mla ? 0 : s.head_dim}, at::kFloat));
  }
  if (shape.kv_blocks) reserve_kv(*shape.kv_blocks);
}

TierRead CpuBackend::load_expert(std::int64_t layer, SlotRef slot, ExpertId expert) {
  ExpertSlots& to = slot.scratch ? scratch_ : slots_[static_cast<std::size_t>(layer)];
  const HostExpert& e = store_->expert_tensors(expert);
  const auto at = static_cast<std::size_t>(slot.slot);
  TierRead bytes;
  if (to.delta_only[at]) {
    // The dense part is the base's, in another slot of the layer (the runtime pinned it first).
    std::size_t base = 0;
    while (base < to.held.size() && (to.held[base] != e.dense || to.delta_only[base])) ++base;
    if (e.delta < 0 || base == to.held.size()) throw std::logic_error("a delta-only slot loaded without its base pinned in the layer");
    to.dense[at] = to.dense[base];
  } else if (mapped()) {
    to.in_place[static_cast<std::size_t>(to.dense[at])] = expert_in_place(*store_, expert, bytes);
  } else {
    const std::int64_t I = store_->spec().expert_intermediate, d = to.dense[at];
    // One pass each: a copy as stored, or converting to fp32.
    bytes += fill_tensor(*store_, e.gate, to.gate_up[d].narrow(0, 0, I));
    bytes += fill_tensor(*store_, e.up, to.gate_up[d].narrow(0, I, I));
    bytes += fill_tensor(*store_, e.down, to.down[d]);
  }
  to.held[at] = expert;
  to.has_delta[at] = e.delta >= 0;
  if (e.delta >= 0) {
    to.delta[at] = store_->delta(e.delta);  // reuses the slot's arrays' capacity
    bytes.bytes += to.delta[at].bytes();
  }
  return bytes;
}

MlpWeights CpuBackend::expert_in_place(const HostStore& store, ExpertId id, TierRead& read) const {
  const HostExpert& e = store.expert_tensors(id);
  auto get = [&](TensorId t) { return in_place_or_copy(store, t, mapped_expert_dtype(store.tensor(t)), read); };
  return {.down = get(e.down), .gate = get(e.gate), .up = get(e.up)};
}

at::ScalarType CpuBackend::buffer_dtype(const HostTensor& t, std::size_t i) const {
  // Mapped reads what Stored would copy as stored in place, and fp32 tensors too.
  return set_dtype(t, store_->non_expert_names()[i], mapped() ? CpuWeights::Stored : shape_.cpu_weights);
}

// A fill ahead converts the set on a thread of its own, so that it overlaps the steps that run
// meanwhile (none of which reads `buffer`); the bytes it will read are counted here, before it starts.
std::uint64_t CpuBackend::start_set(int buffer, int set) {
  wait_set(buffer);
  const SetBuffer& b = buffers_[static_cast<std::size_t>(buffer)];
  const std::vector<TensorId>& ids = store_->set_tensors(set);
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const HostTensor& t = store_->tensor(ids[i]);
    if (b.held[i] != ids[i] && !(mapped() && readable_in_place(t, buffer_dtype(t, i)))) bytes += t.bytes.size();
  }
  fills_[static_cast<std::size_t>(buffer)] = std::async(std::launch::async, [this, buffer, set] { return fill(buffer, set); });
  return bytes;
}

bool CpuBackend::set_ready(int buffer) {
  const std::future<std::uint64_t>& f = fills_[static_cast<std::size_t>(buffer)];
  return !f.valid() || f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void CpuBackend::wait_set(int buffer) {
  std::future<std::uint64_t>& f = fills_[static_cast<std::size_t>(buffer)];
  if (f.valid()) f.get();  // rethrows what the fill threw
}

std::uint64_t CpuBackend::load_set(int buffer, int set) {
  wait_set(buffer);  // a fill ahead nobody claimed finishes first: this one overwrites it
  return fill(buffer, set);
}

std::uint64_t CpuBackend::fill(int buffer, int set) {
  SetBuffer& b = buffers_[static_cast<std::size_t>(buffer)];
  const std::vector<TensorId>& ids = store_->set_tensors(set);
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (b.held[i] == ids[i]) continue;  // the same tensor: nothing to copy
    const HostTensor& t = store_->tensor(ids[i]);
    const at::ScalarType dtype = buffer_dtype(t, i);
    at::Tensor& to = b.tensors[i];
    if (mapped()) {
      TierRead read;
      to = in_place_or_copy(*store_, ids[i], dtype, read);
      bytes += read.bytes;
    } else {
      if (!to.defined() || to.sizes() != at::IntArrayRef(t.shape) || to.scalar_type() != dtype) to = at::empty(t.shape, dtype);
      bytes += fill_tensor(*store_, ids[i], to).bytes;
    }
    b.held[i] = ids[i];
  }
  assemble(b);
  return bytes;
}

void CpuBackend::assemble(SetBuffer& b) const {
  // Mapped keeps gate and up apart: joining them would copy what is read in place.
  b.weights = assemble_weights(store_->spec(), [&](const std::string& name) { return b.tensors[name_index_.at(name)]; },
                               /*with_experts=*/false, /*join_mlps=*/!mapped());
}

void CpuBackend::rebase(const HostStore& next, const StoreMap& map) {
  for (std::size_t b = 0; b < fills_.size(); ++b) wait_set(static_cast<int>(b));  // they read the store
  if (!mapped() && expert_dtype_ == at::kBFloat16 && !experts_bf16(next))  // before anything changes: the runtime serves on
    throw InvalidArgument("family", "experts", "are not all bf16, and the runtime's slots hold bf16 (as the family served so far)",
                          "serve a family of one dtype, or serve with --cpu-weights fp32");
  store_ = &next;
  const auto expert = [&](ExpertId e) { return map.expert_of(e); };
  std::ranges::transform(scratch_.held, scratch_.held.begin(), expert);
  for (ExpertSlots& slots : slots_) std::ranges::transform(slots.held, slots.held.begin(), expert);
  for (SetBuffer& b : buffers_) std::ranges::transform(b.held, b.held.begin(), [&](TensorId t) { return map.tensor_of(t); });
  if (mapped()) repoint(next);
}

// Mapped: slots and buffers read the previous store's files, which may go with it; each now reads
// the same tensor in the next store's (what nobody holds any more is dropped: it is filled before it
// is read again). Copies of tensors not read in place are made again: a change of family is rare.
void CpuBackend::repoint(const HostStore& next) {
  TierRead unused;
  auto slots_of = [&](ExpertSlots& to) {
    for (std::size_t at = 0; at < to.held.size(); ++at) {
      if (to.delta_only[at]) continue;
      MlpWeights& w = to.in_place[static_cast<std::size_t>(to.dense[at])];
      w = to.held[at] >= 0 ? expert_in_place(next, to.held[at], unused) : MlpWeights{};
    }
  };
  slots_of(scratch_);
  for (ExpertSlots& to : slots_) slots_of(to);
  for (SetBuffer& b : buffers_) {
    bool whole = true;
    for (std::size_t i = 0; i < b.held.size(); ++i) {
      if (b.held[i] < 0) {
        b.tensors[i] = at::Tensor();
        whole = false;
        continue;
      }
      b.tensors[i] = in_place_or_copy(next, b.held[i], buffer_dtype(next.tensor(b.held[i]), i), unused);
    }
    if (whole)
      assemble(b);
    else
      b.weights = {};  // filled before it runs again (fill() assembles it then)
  }
}

void CpuBackend::reserve_kv(std::int64_t blocks) {
  if (blocks <= kv_blocks_) return;
  // Unlimited pools grow by doubling; a budgeted one is allocated whole at the start.
  const std::int64_t target = shape_.kv_blocks ? blocks : std::max(blocks, 2 * kv_blocks_);
  const std::int64_t rows = target * shape_.kv_block_tokens;
  for (std::size_t l = 0; l < k_.size(); ++l) {
    for (at::Tensor* t : {&k_[l], &v_[l]}) {
      at::Tensor grown = at::empty({rows, t->size(1), t->size(2)}, at::kFloat);
      // A decode step reads each sequence's rows from blocks scattered over the pool.
      advise_huge_pages(grown.data_ptr(), grown.nbytes());
      if (t->size(0) > 0) grown.narrow(0, 0, t->size(0)).copy_(*t);
      *t = grown;
    }
  }
  kv_blocks_ = target;
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(const HostStore& store, const BackendShape& shape) {
  return std::make_unique<cpu::CpuBackend>(store, shape);
}

}  // namespace mosaic
