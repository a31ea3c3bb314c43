#pragma once
// A HuggingFace checkpoint folder: config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json; or a folder over another checkpoint, its base: an ESFT adapter
// (model/esft_adapter.h) or a DeltaMoE delta folder (docs/delta-format.md). Opening one validates
// every tensor the config requires (present, floating point, the right shape); the weights stay
// memory-mapped, nothing is copied.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>
#include <span>
#include <string>
#include <vector>

#include "model/delta_codec.h"
#include "model/model_spec.h"
#include "model/safetensors.h"
#include "model/weight_names.h"

namespace mosaic {

// One required tensor as found in the checkpoint.
struct Weight {
  ExpectedTensor expected;
  DType dtype = DType::F32;
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  std::uint64_t bytes() const { return info->nbytes(); }
  std::span<const std::byte> data() const { return file->data(*info); }
};

// Throws FormatError naming the file, the tensor and the element when `w` holds a NaN or an
// infinity: such weights serve all-NaN logits (greedy decoding prints token 0 forever). Reads the
// weight once; callers check where they copy or convert it anyway.
void require_finite(const Weight& w);

class Checkpoint;

// A weight as its checkpoint means it, in fp32, a range at a time: its stored elements, plus for a
// delta folder's expert the packed Δ̂ over the same range (the pack read and checked once, here).
// Every reader of expert weights goes through this, so that none mistakes a delta folder's experts
// for its base's.
class WeightFloats {
 public:
  WeightFloats(const Checkpoint& ck, const Weight& w);
  std::size_t size() const { return static_cast<std::size_t>(w_->info->numel()); }
  void read(std::size_t offset, std::span<float> out) const;  // elements [offset, offset + out.size())
  bool is_stored() const { return !delta_; }  // the stored bytes are what it means
  // Gives the mapped pages read so far back (model/mapped_file.h): for readers that stream a family
  // larger than RAM, one matrix at a time.
  void release() const;

 private:
  const Weight* w_;
  std::unique_ptr<PackedDelta> delta_;
  DeltaFormat format_;
};

class Checkpoint {
 public:
  // Throws mosaic::Error subclasses. `base_hint`: the base of an ESFT adapter whose expert_cfg.json
  // names none (DeepSeek's), as the caller was given it; ignored otherwise.
  explicit Checkpoint(const std::filesystem::path& dir, const std::filesystem::path& base_hint = {});
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  const std::filesystem::path& dir() const { return dir_; }
  const ModelSpec& spec() const { return spec_; }
  const std::vector<Weight>& weights() const { return weights_; }  // expected_tensors(spec) order
  const Weight& weight(const std::string& name) const;             // throws MissingError
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  std::vector<std::string> unused_tensors() const;  // stored but not required by the config
  // For an ESFT adapter folder (expert_cfg.json): the (layer, expert) pairs it tunes; else empty.
  const std::vector<std::pair<std::int64_t, std::int64_t>>& adapter_experts() const { return adapter_experts_; }
  // For an ESFT adapter or a delta folder: the folder of the checkpoint it builds on (base_model,
  // resolved); else empty.
  const std::filesystem::path& base_dir() const { return base_dir_; }
  // The tokenizer.json that encodes this variant's text: the folder's own, else, for an adapter or a
  // delta folder without one (DeepSeek's released adapters carry none), its base's.
  std::filesystem::path tokenizer_file() const;
  bool is_adapter() const { return kind_ == Kind::Adapter; }
  // A delta folder: weights() lists its base's expert tensors, to which delta_pack()'s delta is added.
  bool is_delta() const { return kind_ == Kind::Delta; }
  const DeltaFormat& delta_format() const { return delta_format_; }
  // The packed delta of expert weight `name`, read and checked (FormatError naming the array).
  // Precondition: is_delta().
  PackedDelta delta_pack(const Weight& expert) const;

  std::uint64_t non_expert_bytes() const;
  std::uint64_t expert_bytes(std::int64_t layer, std::int64_t expert) const;
  // A delta folder's packed arrays for the expert (as stored; 0 for other checkpoints): what a slot
  // holding its delta adds to the dense expert.
  std::uint64_t packed_delta_bytes(std::int64_t layer, std::int64_t expert) const;
  std::uint64_t total_bytes() const;

 private:
  std::filesystem::path dir_;
  ModelSpec spec_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<Weight> weights_;
  std::unordered_map<std::string, std::size_t> by_name_;  // into weights_
  std::vector<std::uint64_t> expert_bytes_, packed_bytes_;  // [layer * experts + expert]
  std::vector<std::pair<std::int64_t, std::int64_t>> adapter_experts_;  // (layer, expert)
  std::filesystem::path base_dir_;
  enum class Kind { Full, Adapter, Delta } kind_ = Kind::Full;
  // An adapter's tensors stored under other names than they stand for (DeepSeek's "layers.N.…"):
  // the name → as stored, and the stored names so renamed.
  std::map<std::string, std::string> stored_names_;
  std::set<std::string> renamed_;
  std::set<std::string> packs_;  // a delta folder's pack arrays (not unused tensors)
  const SafetensorsFile* delta_file_ = nullptr;  // the delta folder's own model.safetensors
  DeltaFormat delta_format_;
};

}  // namespace mosaic
