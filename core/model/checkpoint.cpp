#include "model/checkpoint.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"

namespace mosaic {
namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Shard file names of a sharded checkpoint, and which shard holds each tensor.
std::map<std::string, std::string> read_index(const std::filesystem::path& index) {
  std::ifstream in(index, std::ios::binary);
  if (!in) throw IoError(index.string(), "", "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
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

Checkpoint::Checkpoint(const std::filesystem::path& dir) : dir_(dir) {
  if (!std::filesystem::is_directory(dir))
    throw MissingError(dir.string(), "", "is not a folder", "give the checkpoint folder holding config.json");
  spec_ = load_model_spec(dir / "config.json");

  // Where each tensor lives: one file, or the shards the index names.
  std::map<std::string, const SafetensorsFile*> location;
  const auto single = dir / "model.safetensors";
  const auto index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const TensorInfo& t : files_.back()->tensors()) location[t.name] = files_.back().get();
  } else if (std::filesystem::exists(index)) {
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (const auto& [name, shard] : read_index(index)) {
      auto& file = by_shard[shard];
      if (!file) {
        if (!std::filesystem::exists(dir / shard))
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

  const auto expected = expected_tensors(spec_);
  weights_.reserve(expected.size());
  expert_bytes_.assign(static_cast<std::size_t>(spec_.num_layers * spec_.num_experts), 0);
  for (const ExpectedTensor& e : expected) {
    const auto it = location.find(e.name);
    if (it == location.end())
      throw MissingError(dir.string(), "tensor '" + e.name + "'",
                         "is required by config.json (" + std::string(spec_.model_type()) + ") but absent from the checkpoint",
                         "the weights are incomplete or belong to another configuration");
    const TensorInfo* info = it->second->find(e.name);
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
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

const Weight& Checkpoint::weight(const std::string& name) const {
  if (const auto it = by_name_.find(name); it != by_name_.end()) return weights_[it->second];
  throw MissingError(dir_.string(), "tensor '" + name + "'", "is not a weight of this model");
}

std::vector<std::string> Checkpoint::unused_tensors() const {
  std::vector<std::string> out;
  for (const auto& f : files_)
    for (const TensorInfo& t : f->tensors())
      if (!by_name_.count(t.name)) out.push_back(t.name);
  return out;
}

std::uint64_t Checkpoint::non_expert_bytes() const {
  std::uint64_t n = 0;
  for (const Weight& w : weights_)
    if (!w.expected.is_expert()) n += w.bytes();
  return n;
}

std::uint64_t Checkpoint::expert_bytes(std::int64_t layer, std::int64_t expert) const {
  return expert_bytes_.at(static_cast<std::size_t>(layer * spec_.num_experts + expert));
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t n = 0;
  for (const Weight& w : weights_) n += w.bytes();
  return n;
}

}  // namespace mosaic
