#include "model/synthetic.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/parallel.h"
#include "model/dtype_convert.h"
#include "model/esft_adapter.h"
#include "model/safetensors.h"
#include "model/weight_names.h"

namespace mosaic {
namespace {

bool is_norm(const std::string& name) { return name.find("norm.weight") != std::string::npos; }

// Random values for `expected` (each tensor's from its seed, name and place), stored under the names
// `stored_name` gives, in `dtype`.
// Chunks of 2^20 values, each from its own generator seeded by (seed, chunk), filled on every core:
// deterministic for a seed whatever the thread count, and fast enough for multi-GB benchmark models.
void write_synthetic_tensors(const std::filesystem::path& file, const std::vector<ExpectedTensor>& expected, DType dtype, std::uint64_t seed,
                             const std::function<std::uint64_t(const ExpectedTensor&)>& seed_of,
                             const std::function<std::string(const std::string&)>& stored_name) {
  constexpr std::int64_t kChunk = std::int64_t(1) << 20;
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorBytes> tensors;
  struct Job { std::size_t tensor; std::int64_t begin, end; std::uint64_t stream; };
  std::vector<Job> jobs;
  storage.reserve(expected.size());
  for (const ExpectedTensor& e : expected) {
    std::int64_t numel = 1;
    for (auto d : e.shape) numel *= d;
    storage.emplace_back(static_cast<std::size_t>(numel) * dtype_size(dtype));
    // A chunk's stream: its tensor's seed, name and place, so that a tensor's values do not depend on
    // the tensors written before it.
    const std::uint64_t tensor_seed = seed_of ? seed_of(e) : seed;
    const std::uint64_t name_hash = std::hash<std::string>{}(e.name);
    for (std::int64_t b = 0; b < numel; b += kChunk)
      jobs.push_back({storage.size() - 1, b, std::min(numel, b + kChunk), tensor_seed * 0x9E3779B97F4A7C15ull ^ (name_hash + static_cast<std::uint64_t>(b / kChunk))});
  }
  parallel_for(jobs.size(), thread_count(0), [&](std::size_t j, unsigned) {
    const Job& job = jobs[j];
    std::mt19937_64 rng(job.stream);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::byte* buf = storage[job.tensor].data();
    const float base = is_norm(expected[job.tensor].name) ? 1.0f : 0.0f;
    for (std::int64_t i = job.begin; i < job.end; ++i) {
      const float v = base + normal(rng);
      if (dtype == DType::F32) {
        std::memcpy(buf + 4 * i, &v, 4);
      } else {
        const std::uint16_t h = dtype == DType::BF16 ? float_to_bf16(v) : float_to_f16(v);
        std::memcpy(buf + 2 * i, &h, 2);
      }
    }
  });
  for (std::size_t i = 0; i < expected.size(); ++i)
    tensors.push_back({stored_name ? stored_name(expected[i].name) : expected[i].name, dtype, expected[i].shape, storage[i]});
  write_safetensors(file, tensors, {{"format", "pt"}});
}

void create_folder(const std::filesystem::path& dir, DType dtype) {
  if (dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::F32)
    throw InvalidArgument(dir.string(), "dtype", "synthetic weights are written as BF16, F16 or F32");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir.string(), "", "cannot create folder: " + ec.message());
}

}  // namespace

void write_synthetic_checkpoint(const std::filesystem::path& dir, const ModelSpec& spec, DType dtype, std::uint64_t seed,
                                const std::function<std::uint64_t(const ExpectedTensor&)>& seed_of) {
  create_folder(dir, dtype);
  write_synthetic_tensors(dir / "model.safetensors", expected_tensors(spec), dtype, seed, seed_of, {});
  const std::string config = to_config_json(spec);
  write_file_atomically(dir / "config.json", [&](std::ostream& out) { out << config; });
}

void write_synthetic_esft_adapter(const std::filesystem::path& dir, const ModelSpec& spec, const EsftAdapterConfig& cfg, DType dtype,
                                  std::uint64_t seed) {
  create_folder(dir, dtype);
  std::vector<ExpectedTensor> tuned;
  for (const ExpectedTensor& t : expected_tensors(spec)) {
    if (!t.is_expert()) continue;
    const auto it = cfg.experts.find(t.layer);
    if (it != cfg.experts.end() && std::find(it->second.begin(), it->second.end(), t.expert) != it->second.end()) tuned.push_back(t);
  }
  // As DeepSeek releases them: the inner model's names ("layers.N.…"), DeepSeek's expert_cfg.json, and
  // the base's config.json beside them.
  write_synthetic_tensors(dir / "model.safetensors", tuned, dtype, seed, {}, [](const std::string& name) {
    static const std::string prefix = "model.";
    return name.starts_with(prefix) ? name.substr(prefix.size()) : name;
  });
  const std::string text = deepseek_expert_cfg_text(cfg, spec);
  write_file_atomically(dir / kExpertCfgFile, [&](std::ostream& out) { out << text; });
  const std::string config = to_config_json(spec);
  write_file_atomically(dir / "config.json", [&](std::ostream& out) { out << config; });
}

void write_synthetic_family(const std::filesystem::path& dir, const ModelSpec& spec, DType dtype, int variants,
                            const std::function<bool(std::int64_t, std::int64_t)>& shared, std::uint64_t seed) {
  for (int v = 0; v < variants; ++v) {
    // Appended, not "v" + to_string(v): GCC 12 warns of that operator+ (-Wrestrict, its PR 105329).
    const std::filesystem::path d = dir / std::string("v").append(std::to_string(v));
    std::error_code ec;
    if (std::filesystem::exists(d / "config.json", ec) && std::filesystem::exists(d / "model.safetensors", ec)) continue;
    const std::uint64_t own = seed + 1000 * static_cast<std::uint64_t>(v);
    write_synthetic_checkpoint(d, spec, dtype, own, [&](const ExpectedTensor& t) {
      return t.is_expert() && shared(t.layer, t.expert) ? seed : own;
    });
  }
}

ModelSpec mixtral_like_spec(std::int64_t vocab, std::int64_t hidden, std::int64_t intermediate,
                            std::int64_t layers, std::int64_t experts) {
  ModelSpec s;
  s.arch = Arch::Mixtral;
  s.vocab_size = vocab;
  s.hidden_size = hidden;
  s.num_layers = layers;
  s.head_dim = 64;
  s.num_heads = hidden / s.head_dim;
  s.num_kv_heads = std::max<std::int64_t>(1, s.num_heads / 4);
  s.num_experts = experts;
  s.top_k = 2;
  s.norm_topk_prob = true;
  s.expert_intermediate = intermediate;
  s.rope_theta = 1e6;
  s.rms_norm_eps = 1e-5;
  s.max_position_embeddings = 4096;
  s.sparse_layers.assign(static_cast<std::size_t>(layers), true);
  s.bos_token_id = 1;
  s.eos_token_ids = {2};
  return s;
}

std::int64_t parameter_count(const ModelSpec& spec) {
  std::int64_t n = 0;
  for (const ExpectedTensor& e : expected_tensors(spec)) {
    std::int64_t k = 1;
    for (auto d : e.shape) k *= d;
    n += k;
  }
  return n;
}

std::int64_t active_parameter_count(const ModelSpec& spec) {
  std::int64_t expert = 0;
  for (const ExpectedTensor& e : expected_tensors(spec)) {
    if (!e.is_expert()) continue;
    std::int64_t k = 1;
    for (auto d : e.shape) k *= d;
    expert += k;
  }
  const std::int64_t per_expert = spec.num_experts ? expert / (spec.num_sparse_layers() * spec.num_experts) : 0;
  return parameter_count(spec) - expert + per_expert * spec.num_sparse_layers() * spec.top_k;
}

}  // namespace mosaic
