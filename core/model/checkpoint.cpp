#include "model/checkpoint.h"

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "common/error.h"
#include "model/mapped_file.h"
#include "common/json_text.h"
#include "common/text_file.h"
#include "model/content_hash.h"
#include "model/delta_config.h"
#include "model/delta_pack.h"
#include "model/dtype_convert.h"
#include "model/esft_adapter.h"

namespace mosaic {
namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Whether a checkpoint's file is there (file_present).
bool present(const std::filesystem::path& path) { return file_present(path, "point it at the checkpoint's file, or remove it"); }

// The index after `marker` in `name` ("model.layers.7.mlp" → 7 for "layers."); nullopt when absent.
std::optional<std::int64_t> index_after(const std::string& name, std::string_view marker) {
  const auto at = name.find(marker);
  if (at == std::string::npos) return std::nullopt;
  std::int64_t n = 0;
  std::size_t i = at + marker.size(), digits = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 18; ++i, ++digits) n = n * 10 + (name[i] - '0');
  if (digits == 0 || i >= name.size() || name[i] != '.') return std::nullopt;
  return n;
}

// Why a tensor the config does not ask for means the config and the weights disagree, or nullopt
// for an extra that is harmless (older checkpoints carry rotary `inv_freq` buffers, for one).
std::optional<std::string> contradicts_config(const std::string& name, const ModelSpec& s) {
  if (const auto layer = index_after(name, "layers."); layer && *layer >= s.num_layers + s.mtp_layers)
    return "belongs to layer " + std::to_string(*layer) + ", but config.json has num_hidden_layers " + std::to_string(s.num_layers);
  if (const auto expert = index_after(name, "experts."); expert && *expert >= s.num_experts)
    return "belongs to expert " + std::to_string(*expert) + ", but config.json has " + std::to_string(s.num_experts) + " experts";
  if (s.tie_word_embeddings && name == "lm_head.weight")
    return "is a separate output head, but config.json has tie_word_embeddings: true (the head is the embedding)";
  return std::nullopt;
}

// Whether tensor `t` of `file` holds exactly what weight `w` holds (some tools save a tied output head
// as a copy of the embedding).
bool same_bytes(const SafetensorsFile& file, const TensorInfo& t, const Weight& w) {
  const auto a = file.data(t), b = w.data();
  return t.dtype == w.dtype && t.shape == w.info->shape && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Shard file names of a sharded checkpoint, and which shard holds each tensor.
std::map<std::string, std::string> read_index(const std::filesystem::path& index) {
  require_regular_file(index, "re-save the checkpoint");
  std::ifstream in(index, std::ios::binary);
  if (!in) throw IoError(index.string(), "", "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = parse_json_bounded(ss.str(), index.string());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(index.string(), "", std::string("not valid JSON: ") + e.what(), "re-save the checkpoint");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw FormatError(index.string(), "field 'weight_map'", "is missing or not an object", "re-save the checkpoint");
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : j["weight_map"].items()) {
    if (!shard.is_string()) throw FormatError(index.string(), "weight_map." + name, "is not a file name", "re-save the checkpoint");
    const std::string file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw FormatError(index.string(), "weight_map." + name, "names '" + file + "', which is not a file in this folder",
                        "shards must sit beside the index");
    map[name] = file;
  }
  return map;
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& dir, const std::filesystem::path& base_hint) : dir_(dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    throw MissingError(dir.string(), "", "does not exist", "check the path: give the checkpoint folder holding config.json");
  if (!std::filesystem::is_directory(dir, ec))
    throw MissingError(dir.string(), "", "is a file, not a folder", "give the checkpoint folder holding config.json");
  spec_ = load_model_spec(dir / "config.json");
  // A quantized release (DeepSeek-V3/R1's FP8 blocks, Qwen3's -FP8, GPTQ, AWQ, MXFP4, …) stores codes
  // and scales, not the weights: refused by its method, rather than later by a tensor's dtype or a
  // name the architecture does not have.
  if (!spec_.quantization.empty())
    throw UnsupportedError((dir / "config.json").string(), "field 'quantization_config'",
                           (spec_.quantization == "unnamed" ? std::string("says") : "quant_method '" + spec_.quantization + "' says") +
                               " the weights are quantized; Mosaic serves unquantized BF16, F16, F32 or F64 weights",
                           "use the model's BF16 release, or dequantize the checkpoint first and drop quantization_config; "
                           "DeepSeek-V3's inference/fp8_cast_bf16.py does so for FP8 blocks");

  // Where each tensor lives: one file, or the shards the index names.
  std::map<std::string, const SafetensorsFile*> location;
  const auto single = dir / "model.safetensors";
  const auto index = dir / "model.safetensors.index.json";
  if (present(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const TensorInfo& t : files_.back()->tensors()) location[t.name] = files_.back().get();
  } else if (present(index)) {
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const auto& [name, shard] : read_index(index)) {
      auto& file = by_shard[shard];
      if (!file) {
        if (!present(dir / shard))
          throw MissingError((dir / shard).string(), "", "is listed in model.safetensors.index.json but absent",
                             "copy every shard of the checkpoint");
        files_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
        file = files_.back().get();
      }
      if (!file->find(name))
        throw MissingError(file->path().string(), "tensor '" + name + "'",
                           "is listed in model.safetensors.index.json but not stored in this shard", "re-save the checkpoint");
      location[name] = file;
    }
  } else {
    throw MissingError(dir.string(), "", "holds neither model.safetensors nor model.safetensors.index.json",
                       "Mosaic reads safetensors checkpoints; convert .bin weights with transformers' save_pretrained");
  }

  // A folder over a base checkpoint (an ESFT adapter, a delta folder) opens the base, which must be
  // a full checkpoint of the same model; this checkpoint then owns the base's files too.
  // `given`: the base came from beside the folder (--base, or the full checkpoint listed before it),
  // as its config names none: a refusal then names that base, not a field the file does not have.
  auto open_base = [&](const std::filesystem::path& base_model, const std::string& cfg_file, const std::string& what, bool given = false) {
    const auto base_dir = (base_model.is_absolute() ? base_model : dir / base_model).lexically_normal();
    const std::string field_at = given ? base_dir.string() : (dir / cfg_file).string();
    const std::string field = given ? "the base given for " + dir.string() : "base_model";
    if (!std::filesystem::is_directory(base_dir))
      throw MissingError(field_at, field, given ? "is not a folder" : "names " + base_dir.string() + ", which is not a folder",
                         given ? "give the folder of the full checkpoint the " + what + " was made from"
                               : "put the base checkpoint the " + what + " was made from there, or correct base_model");
    std::error_code ec;
    if (std::filesystem::equivalent(base_dir, dir, ec))
      throw UnsupportedError(field_at, field, given ? "is the " + what + " itself" : "names this folder itself",
                             given ? "give the full checkpoint the " + what + " was made from" : "point base_model at the full checkpoint the " + what + " was made from");
    // Checked before opening: a base that is itself built on a base could lead back here.
    for (const char* own : {kExpertCfgFile, kDeltaCfgFile})
      if (present(base_dir / own))
        throw UnsupportedError(field_at, field, (given ? "is" : "names " + base_dir.string() + ", which is") + std::string(" itself built on a base (it holds ") + own + ")",
                               given ? "give a full checkpoint" : "point base_model at a full checkpoint");
    Checkpoint base(base_dir);
    base_dir_ = base_dir;
    if (const auto diff = first_difference(base.spec(), spec_))
      throw MismatchError(dir.string(), "config.json", "differs from the base model's (" + *diff + ")",
                          "the " + what + " was made from another model");
    return base;
  };

  // An ESFT adapter: what it tuned comes from its own files, which must hold exactly that; everything
  // else from the base checkpoint (named by base_model, or given beside it for DeepSeek's adapters).
  if (present(dir / kExpertCfgFile)) {
    const EsftAdapterConfig cfg = read_expert_cfg(dir / kExpertCfgFile, spec_);
    if (cfg.base_model.empty() && base_hint.empty())
      throw MissingError((dir / kExpertCfgFile).string(), "base_model",
                         "is absent, and no full checkpoint is listed before the adapter or given with --base (DeepSeek's "
                         "adapters name their base only in their README)",
                         "list the base before the adapter (--variants BASE ADAPTER …; in a folder of variants, the base's "
                         "folder name must sort before the adapter's), give --base DIR with --model, or add "
                         "\"base_model\": \"../base\" to expert_cfg.json");
    const WeightNames names(spec_);
    // What esft.py's to_esft leaves trainable is what it saves: the listed experts, every MoE layer's
    // shared experts when "shared_experts" says so, and every other non-expert tensor when
    // "non_expert_modules" does (a router's correction bias is a buffer, saved or not).
    std::set<std::string> required, optional;
    for (const auto& [layer, ids] : cfg.experts)
      for (std::int64_t e : ids) {
        adapter_experts_.emplace_back(layer, e);
        for (ExpertRole r : {ExpertRole::Gate, ExpertRole::Up, ExpertRole::Down}) required.insert(names.expert(layer, e, r));
      }
    for (const ExpectedTensor& e : expected_tensors(spec_)) {
      if (!adapter_stores(cfg, spec_, e)) continue;
      (spec_.router_bias && e.name == names.router_bias(e.layer) ? optional : required).insert(e.name);
    }
    const std::string tunes = std::string("its listed experts") + (cfg.shared_experts ? ", the shared experts" : "") +
                              (cfg.non_expert_modules ? ", every non-expert tensor" : "");
    std::map<std::string, const SafetensorsFile*> own;
    for (const auto& [stored, file] : location) {
      const std::string name = adapter_tensor_name(stored);
      if (!required.count(name) && !optional.count(name))
        throw FormatError(file->path().string(), "tensor '" + stored + "'", "is not one of the tensors expert_cfg.json says the adapter tunes (" + tunes + ")",
                          "an ESFT adapter stores exactly what it tuned");
      if (!own.emplace(name, file).second)
        throw FormatError(file->path().string(), "tensor '" + stored + "'", "is stored twice, as '" + name + "' and as '" + stored + "'", "keep one");
      if (name != stored) stored_names_[name] = stored;
    }
    for (const std::string& name : required)
      if (!own.count(name))
        throw MissingError(dir.string(), "tensor '" + name + "'", "is tuned by expert_cfg.json (" + tunes + ") but absent from the adapter");
    location = std::move(own);
    Checkpoint base = open_base(cfg.base_model.empty() ? std::filesystem::absolute(base_hint) : cfg.base_model, kExpertCfgFile, "adapter",
                                cfg.base_model.empty());
    kind_ = Kind::Adapter;
    for (const Weight& w : base.weights()) location.emplace(w.expected.name, w.file);  // keeps the adapter's own
    for (const auto& [name, stored] : base.stored_names_) stored_names_.emplace(name, stored);
    for (auto& f : base.files_) files_.push_back(std::move(f));
  } else if (present(dir / kDeltaCfgFile)) {
    // A delta folder: its own non-expert tensors, and for each expert the base's weight plus a pack.
    const DeltaConfig cfg = read_delta_config(dir / kDeltaCfgFile);
    if (files_.size() != 1 || files_.front()->path().filename() != "model.safetensors")
      throw FormatError(dir.string(), "", "is a delta folder (delta.json) without a single model.safetensors",
                        "write it again with `mosaic-cli delta compress`");
    delta_file_ = files_.front().get();
    Checkpoint base = open_base(cfg.base_model, kDeltaCfgFile, "delta");
    if (checkpoint_sha256(base) != cfg.base_sha256)
      throw MismatchError((dir / kDeltaCfgFile).string(), "base_sha256",
                          "names another base than the checkpoint now at " + base_dir_.string() + " (its files have changed)",
                          "put back the base the delta was taken from, or compress the variant again from this base");
    kind_ = Kind::Delta;
    delta_format_ = cfg.format;
    packed_bytes_.assign(static_cast<std::size_t>(spec_.num_layers * spec_.num_experts), 0);
    for (const ExpectedTensor& e : expected_tensors(spec_)) {
      if (!e.is_expert()) continue;
      if (location.count(e.name))
        throw FormatError(delta_file_->path().string(), "tensor '" + e.name + "'", "is a dense expert weight in a delta folder",
                          "a delta folder stores its experts as packs; write it again with `mosaic-cli delta compress`");
      if (e.shape.size() != 2) throw UnsupportedError(dir.string(), e.name, "is not a matrix", "deltas are taken of 2-D expert weights");
      check_format(delta_format_, e.shape[0], e.shape[1], (dir / kDeltaCfgFile).string() + ": " + e.name);
      for (const TensorInfo* t : find_pack(*delta_file_, e.name, e.shape[0], e.shape[1], delta_format_)) {
        packs_.insert(t->name);
        packed_bytes_[static_cast<std::size_t>(e.layer * spec_.num_experts + e.expert)] += t->nbytes();
      }
      location[e.name] = base.weight(e.name).file;
    }
    for (auto& f : base.files_) files_.push_back(std::move(f));
  }

  const auto expected = expected_tensors(spec_);
  weights_.reserve(expected.size());
  expert_bytes_.assign(static_cast<std::size_t>(spec_.num_layers * spec_.num_experts), 0);
  for (const ExpectedTensor& e : expected) {
    const auto it = location.find(e.name);
    if (it == location.end())
      throw MissingError(dir.string(), "tensor '" + e.name + "'",
                         "is required by config.json (" + std::string(spec_.model_type()) + ") but absent from the checkpoint",
                         "the weights are incomplete or belong to another configuration");
    const auto stored = stored_names_.find(e.name);
    const TensorInfo* info = it->second->find(stored == stored_names_.end() ? e.name : stored->second);
    if (info->shape != e.shape)
      throw MismatchError(it->second->path().string(), "tensor '" + e.name + "'",
                          "has shape " + shape_str(info->shape) + " but config.json implies " + shape_str(e.shape),
                          "the config and the weights disagree; use the config.json saved with these weights");
    if (!is_floating(info->dtype))
      throw FormatError(it->second->path().string(), "tensor '" + e.name + "'",
                        "is " + std::string(dtype_name(info->dtype)) + "; weights must be floating point", "re-save the checkpoint");
    by_name_.emplace(e.name, weights_.size());
    weights_.push_back({e, info->dtype, it->second, info});
    if (e.is_expert()) expert_bytes_[e.layer * spec_.num_experts + e.expert] += info->nbytes();
  }
  // Weights the config leaves out are not silently dropped when they say the config is wrong.
  for (const auto& [name, stored] : stored_names_) renamed_.insert(stored);
  for (const auto& f : files_)
    for (const TensorInfo& t : f->tensors())
      if (!by_name_.count(t.name) && !packs_.count(t.name) && !renamed_.count(t.name))
        if (const auto why = contradicts_config(t.name, spec_)) {
          if (t.name == "lm_head.weight" && same_bytes(*f, t, weight(WeightNames(spec_).embed()))) continue;  // a redundant tied copy
          throw MismatchError(f->path().string(), "tensor '" + t.name + "'", *why,
                              "the config and the weights disagree; use the config.json saved with these weights");
        }
}

void require_finite(const Weight& w) {
  if (const auto at = first_non_finite(w.dtype, w.data()))
    throw FormatError(w.file->path().string(), "tensor '" + w.expected.name + "'",
                      "holds NaN or infinity (element " + std::to_string(*at) + " of " + std::to_string(w.info->numel()) + ")",
                      "the checkpoint is corrupt or was saved after training diverged; re-download or re-save it");
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

const Weight& Checkpoint::weight(const std::string& name) const {
  if (const auto it = by_name_.find(name); it != by_name_.end()) return weights_[it->second];
  throw MissingError(dir_.string(), "tensor '" + name + "'", "is not a weight of this model");
}

WeightFloats::WeightFloats(const Checkpoint& ck, const Weight& w) : w_(&w) {
  if (!ck.is_delta() || !w.expected.is_expert()) return;
  delta_ = std::make_unique<PackedDelta>(ck.delta_pack(w));
  format_ = ck.delta_format();
}

void WeightFloats::read(std::size_t offset, std::span<float> out) const {
  to_float(w_->dtype, w_->data().data() + offset * dtype_size(w_->dtype), out);
  if (delta_) add_delta_range(*delta_, format_, static_cast<std::int64_t>(offset), out);
}

void WeightFloats::release() const { release_pages(w_->data()); }

PackedDelta Checkpoint::delta_pack(const Weight& expert) const {
  return read_pack(*delta_file_, expert.expected.name, expert.expected.shape[0], expert.expected.shape[1], delta_format_);
}

std::vector<std::string> Checkpoint::unused_tensors() const {
  std::vector<std::string> out;
  for (const auto& f : files_)
    for (const TensorInfo& t : f->tensors())
      if (!by_name_.count(t.name) && !packs_.count(t.name) && !renamed_.count(t.name)) out.push_back(t.name);
  return out;
}

std::uint64_t Checkpoint::non_expert_bytes() const {
  std::uint64_t n = 0;
  for (const Weight& w : weights_)
    if (!w.expected.is_expert()) n += w.bytes();
  return n;
}

std::uint64_t Checkpoint::packed_delta_bytes(std::int64_t layer, std::int64_t expert) const {
  return packed_bytes_.empty() ? 0 : packed_bytes_.at(static_cast<std::size_t>(layer * spec_.num_experts + expert));
}

std::uint64_t Checkpoint::expert_bytes(std::int64_t layer, std::int64_t expert) const {
  return expert_bytes_.at(static_cast<std::size_t>(layer * spec_.num_experts + expert));
}

std::filesystem::path Checkpoint::tokenizer_file() const {
  const std::filesystem::path own = dir_ / "tokenizer.json";
  if (kind_ == Kind::Full || std::filesystem::exists(own)) return own;
  const std::filesystem::path base = base_dir_ / "tokenizer.json";
  return std::filesystem::exists(base) ? base : own;  // neither: the error names the folder's own
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t n = 0;
  for (const Weight& w : weights_) n += w.bytes();
  return n;
}

}  // namespace mosaic
