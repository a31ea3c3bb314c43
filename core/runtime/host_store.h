#pragma once
// The host side of the device: every distinct tensor of a family once, in the checkpoint's own
// dtype, from which the device's non-expert sets and expert slots are filled (converted to the
// backend's compute dtype as they are copied). The bytes stay where the checkpoints hold them
// (memory-mapped): the host tier (runtime/host_tier.h) keeps the most used in RAM within a host
// budget and reads the rest from disk as they are needed.
//
// Targets are what a request names: every variant of the family, full fine-tunes, ESFT adapters and
// delta folders alike. Tensors that are byte-identical across targets are held once, so an adapter
// costs only its tuned experts (and any non-expert tensor that differs from its base's), adapters of
// one base share its non-expert set, and a delta folder's experts are its base's tensors plus packed
// deltas (a delta that expands to zero is no delta: that expert is the base's). No LibTorch here:
// the CPU and CUDA backends both read these bytes.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/delta_codec.h"
#include "model/dtype.h"
#include "model/esft_adapter.h"
#include "model/family.h"
#include "runtime/expert_source.h"
#include "runtime/host_tier.h"

namespace mosaic {

using TensorId = std::int32_t;
using ExpertId = std::int32_t;  // a distinct (gate, up, down) triple of tensors

struct HostTensor {
  std::string name;  // as its first holder names it
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  // Row-major, as stored in the checkpoint, in its mapped file. Read through HostStore::tier(), which
  // keeps the process within its host budget; reading these bytes directly grows it.
  std::span<const std::byte> bytes;
  std::uint64_t size_bytes() const;  // from the shape and dtype: the size even where no bytes are held
  std::int64_t numel() const;        // values, from the shape
};

// A delta folder's packed Δ for one expert (docs/delta-format.md), added to its base's matrices.
struct HostDelta {
  DeltaFormat format;
  PackedDelta gate, up, down;
  std::uint64_t bytes() const;
};
using DeltaId = std::int32_t;

struct HostExpert {
  TensorId gate = -1, up = -1, down = -1;  // a delta expert's are its base's
  DeltaId delta = -1;                      // -1: a dense expert
  ExpertId dense = -1;                     // a delta expert's base as a dense expert, when a target has it
};

// A target as its config files describe it, for a store of shapes (HostStore::of_configs): a full
// variant, an ESFT adapter (its expert_cfg.json) or a delta folder (its delta.json's format) over
// the full target `base`.
struct ConfigTarget {
  std::string name;
  int base = -1;                           // an adapter's or delta folder's base: its index among the targets
  std::optional<EsftAdapterConfig> adapter;  // what the adapter tunes, and so stores
  std::optional<DeltaFormat> delta;          // every expert a packed delta of this format over its base's
};

class HostStore {
 public:
  // Finds the distinct tensors of every variant (the same file and place, or the same bytes) and
  // checks each once for NaN and infinity. `host_budget`: the bytes of them the tier keeps in RAM
  // (nullopt: every one, as read); with a budget the checkpoints are compared in chunks given back
  // as they are done, so that opening a family larger than RAM does not fill it. The family must
  // outlive the store (its files are mapped). Throws what reading the checkpoints throws, and
  // BudgetError for a budget below one non-expert set and a staging chunk.
  explicit HostStore(const Family& family, std::optional<std::uint64_t> host_budget = std::nullopt);
  ~HostStore();
  // The same targets, non-expert sets, experts, deltas and tensors (ids, names, dtypes, shapes) with
  // no bytes behind the tensors: what a simulated device (sim_backend.h) serves, which prices copies
  // by their sizes and reads nothing. A backend that computes refuses it.
  static std::unique_ptr<HostStore> shapes_of(const HostStore& store);
  // A family known by its configs alone, in `dtype`, with no bytes: for a simulated device to serve
  // a family too large for this machine. A full variant's tensors are each its own (nothing shared
  // byte for byte, as fine-tunes of one base are); an adapter holds what it tunes and its base's
  // tensors otherwise; a delta folder its own non-expert tensors and, at every expert, its base's
  // tensors and a packed delta (none expands to zero). Throws InvalidArgument naming a target whose
  // base is not a full target of the list, or that is both an adapter and a delta folder.
  static std::unique_ptr<HostStore> of_configs(const ModelSpec& spec, DType dtype, const std::vector<ConfigTarget>& targets);
  // Full variants only.
  static std::unique_ptr<HostStore> of_configs(const ModelSpec& spec, DType dtype, const std::vector<std::string>& names);
  bool has_bytes() const { return !shapes_only_; }

  const ModelSpec& spec() const { return spec_; }
  int targets() const { return static_cast<int>(targets_.size()); }
  const std::string& name(int target) const { return targets_[static_cast<std::size_t>(target)].name; }
  int index(const std::string& name) const;  // -1 when absent
  std::vector<int> indices(const Family& family) const;  // index() of each of `family`'s variants, in order
  bool is_adapter(int target) const { return targets_[static_cast<std::size_t>(target)].adapter; }
  bool is_delta(int target) const { return targets_[static_cast<std::size_t>(target)].delta; }
  int base_of(int target) const { return targets_[static_cast<std::size_t>(target)].base; }  // -1: none in the family
  // The (layer, expert) pairs an adapter tunes; empty for a full checkpoint.
  const std::vector<std::pair<std::int64_t, std::int64_t>>& tuned(int target) const {
    return targets_[static_cast<std::size_t>(target)].tuned;
  }

  // Non-expert sets: distinct tuples of a target's non-expert tensors (embeddings, attention, norms,
  // routers, shared experts, lm_head), in non_expert_names() order.
  int sets() const { return static_cast<int>(sets_.size()); }
  int set_of(int target) const { return targets_[static_cast<std::size_t>(target)].set; }
  const std::vector<TensorId>& set_tensors(int set) const { return sets_[static_cast<std::size_t>(set)]; }
  const std::vector<std::string>& non_expert_names() const { return non_expert_names_; }
  TensorId set_tensor(int set, const std::string& name) const;  // throws MissingError for another name

  // The distinct expert a target routes to at (layer, expert); -1 in dense layers.
  ExpertId expert(int target, std::int64_t layer, std::int64_t expert) const;
  const HostExpert& expert_tensors(ExpertId id) const { return experts_[static_cast<std::size_t>(id)]; }
  int distinct_experts() const { return static_cast<int>(experts_.size()); }
  const HostDelta& delta(DeltaId id) const { return deltas_[static_cast<std::size_t>(id)]; }
  int deltas() const { return static_cast<int>(deltas_.size()); }
  // Where that expert comes from: the adapter's own tuned expert, a delta folder's, or a full checkpoint's.
  ExpertSource source(int target, std::int64_t layer, std::int64_t expert) const;

  const HostTensor& tensor(TensorId id) const { return tensors_[static_cast<std::size_t>(id)]; }
  int distinct_tensors() const { return static_cast<int>(tensors_.size()); }
  std::uint64_t host_bytes() const { return host_bytes_; }  // the distinct bytes (tensors and packed deltas)
  // Where every read of a tensor's bytes goes: RAM within the host budget, disk past it. Its
  // residency is the store's only mutable state.
  HostTier& tier() const { return *tier_; }
  // tier().read() of a tensor: its bytes in order to `use` (in chunks when they come from disk).
  TierRead read(TensorId id, const HostTier::Use& use) const { return tier_->read(static_cast<std::size_t>(id), use); }

  // The device byte model (analysis/capacity.h, device_bytes): one non-expert set and one routed
  // expert as the device holds them, in the checkpoints' stored dtype.
  std::uint64_t non_expert_bytes() const { return non_expert_bytes_; }
  std::uint64_t expert_bytes() const { return expert_bytes_; }
  std::uint64_t max_delta_bytes() const { return max_delta_bytes_; }  // the largest packed Δ; 0 without deltas

 private:
  struct Target {
    std::string name;
    bool adapter = false, delta = false;
    int base = -1, set = -1;
    std::vector<std::pair<std::int64_t, std::int64_t>> tuned;
    std::vector<ExpertId> experts;  // [layers * experts]
  };
  ModelSpec spec_;
  std::vector<Target> targets_;
  std::vector<HostTensor> tensors_;
  std::vector<HostExpert> experts_;
  std::vector<HostDelta> deltas_;
  std::vector<std::vector<TensorId>> sets_;
  std::vector<std::string> non_expert_names_;
  std::uint64_t host_bytes_ = 0, non_expert_bytes_ = 0, expert_bytes_ = 0, max_delta_bytes_ = 0;
  std::unique_ptr<HostTier> tier_;
  bool shapes_only_ = false;
  HostStore() = default;  // shapes_of
};

}  // namespace mosaic
