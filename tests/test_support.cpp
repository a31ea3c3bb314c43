#include "test_support.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "model/esft_adapter.h"
#include "model/model_spec.h"
#include "model/weight_names.h"

namespace mosaic::test {

fs::path copy_checkpoint(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
    fs::permissions(to / e.path().filename(), fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  }
  return to;
}

void patch_config(const fs::path& dir, const std::string& key, const nlohmann::json& value) {
  auto config = nlohmann::json::parse(read_text(dir / "config.json"));
  config[key] = value;
  std::ofstream(dir / "config.json") << config.dump(1);
}

void rewrite_weights(const fs::path& dir, const std::function<bool(const TensorInfo&)>& keep,
                     const std::function<void(const TensorInfo&, std::vector<std::byte>&)>& edit) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorBytes> out;
  {
    const SafetensorsFile in(dir / "model.safetensors");
    storage.reserve(in.tensors().size());
    for (const TensorInfo& t : in.tensors()) {
      if (!keep(t)) continue;
      const auto bytes = in.data(t);
      auto& buf = storage.emplace_back(bytes.begin(), bytes.end());
      if (edit) edit(t, buf);
      out.push_back({t.name, t.dtype, t.shape, buf});
    }
  }
  write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
}

void write_raw_safetensors(const fs::path& path, const std::string& header, std::size_t data_bytes,
                           std::uint64_t declared) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t n = declared ? declared : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out << std::string(data_bytes, '\0');
}

namespace {
template <class T>
std::vector<T> read_as(const SafetensorsFile& f, const std::string& name, DType want) {
  const TensorInfo* t = f.find(name);
  if (!t || t->dtype != want) throw std::runtime_error("test data lacks tensor " + name);
  std::vector<T> v(static_cast<std::size_t>(t->numel()));
  std::memcpy(v.data(), f.data(*t).data(), t->nbytes());
  return v;
}
}  // namespace

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) { return read_as<float>(f, name, DType::F32); }
std::vector<std::int64_t> read_i64(const SafetensorsFile& f, const std::string& name) {
  return read_as<std::int64_t>(f, name, DType::I64);
}

std::string qwen3_moe_config() {
  return nlohmann::json{{"model_type", "qwen3_moe"}, {"vocab_size", 320}, {"hidden_size", 64}, {"num_hidden_layers", 4},
                        {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32}, {"intermediate_size", 128},
                        {"moe_intermediate_size", 48}, {"num_experts", 8}, {"num_experts_per_tok", 2}, {"norm_topk_prob", true},
                        {"mlp_only_layers", {1}}, {"decoder_sparse_step", 1}, {"rms_norm_eps", 1e-6},
                        {"rope_theta", 1000000.0}, {"attention_bias", false}, {"hidden_act", "silu"}, {"use_sliding_window", false}}
      .dump();
}

// DeepSeek's own spelling (rope_scaling with "type", n_routed_experts), as its Hub configs write it.
std::string deepseek_v2_config() {
  return nlohmann::json{{"model_type", "deepseek_v2"}, {"vocab_size", 320}, {"hidden_size", 64}, {"num_hidden_layers", 3},
                        {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"q_lora_rank", nullptr}, {"kv_lora_rank", 32},
                        {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 16}, {"intermediate_size", 96},
                        {"moe_intermediate_size", 24}, {"n_routed_experts", 8}, {"n_shared_experts", 2}, {"num_experts_per_tok", 2},
                        {"first_k_dense_replace", 1}, {"moe_layer_freq", 1}, {"topk_method", "group_limited_greedy"}, {"n_group", 4},
                        {"topk_group", 2}, {"routed_scaling_factor", 2.0}, {"norm_topk_prob", false}, {"scoring_func", "softmax"},
                        {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                        {"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}, {"beta_fast", 32},
                                          {"beta_slow", 1}, {"mscale", 0.707}, {"mscale_all_dim", 0.707}}},
                        {"attention_bias", false}, {"hidden_act", "silu"}, {"bos_token_id", 0}, {"eos_token_id", 1},
                        {"tie_word_embeddings", false}}
      .dump();
}

// transformers 5's spelling (rope_parameters), as it saves a DeepSeek-V3 config.
std::string deepseek_v3_config() {
  return nlohmann::json{{"model_type", "deepseek_v3"}, {"vocab_size", 320}, {"hidden_size", 64}, {"num_hidden_layers", 3},
                        {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"q_lora_rank", 24}, {"kv_lora_rank", 32},
                        {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8}, {"v_head_dim", 16}, {"intermediate_size", 96},
                        {"moe_intermediate_size", 24}, {"n_routed_experts", 8}, {"n_shared_experts", 1}, {"num_experts_per_tok", 2},
                        {"first_k_dense_replace", 1}, {"n_group", 4}, {"topk_group", 2}, {"routed_scaling_factor", 2.5},
                        {"norm_topk_prob", true}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6}, {"rope_interleave", true},
                        {"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                                             {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}},
                        {"attention_bias", false}, {"hidden_act", "silu"}, {"bos_token_id", 0}, {"eos_token_id", 1},
                        {"tie_word_embeddings", false}}
      .dump();
}

fs::path make_deepseek_adapter(const fs::path& base, const fs::path& to, const DeepseekAdapter& a) {
  fs::create_directories(to);
  fs::copy_file(base / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
  const ModelSpec spec = load_model_spec(base / "config.json");
  const WeightNames names(spec);
  std::set<std::string> tuned;
  for (const auto& [layer, ids] : a.experts)
    for (std::int64_t e : ids)
      for (ExpertRole r : {ExpertRole::Gate, ExpertRole::Up, ExpertRole::Down}) tuned.insert(names.expert(layer, e, r));
  for (const ExpectedTensor& e : expected_tensors(spec)) {
    if (e.is_expert()) continue;
    const bool shared = e.name.find(".shared_experts.") != std::string::npos;
    if (shared ? a.shared_experts : a.non_expert_modules) tuned.insert(e.name);
  }
  const SafetensorsFile file(base / "model.safetensors");
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorBytes> out;
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  const std::string shard = a.model_prefix ? "model.safetensors" : "model-00001-of-000001.safetensors";
  storage.reserve(tuned.size());
  for (const TensorInfo& t : file.tensors()) {
    if (!tuned.count(t.name)) continue;
    const auto bytes = file.data(t);
    auto& buf = storage.emplace_back(bytes.begin(), bytes.end());
    if (t.dtype == DType::F32)
      for (std::size_t i = 0; i + 4 <= buf.size(); i += 4) {
        float f;
        std::memcpy(&f, buf.data() + i, 4);
        f *= 1.25f;
        std::memcpy(buf.data() + i, &f, 4);
      }
    const std::string name = a.model_prefix || !t.name.starts_with("model.layers.") ? t.name : t.name.substr(6);
    out.push_back({name, t.dtype, t.shape, buf});
    map[name] = shard;
  }
  write_safetensors(to / shard, out, {{"format", "pt"}});
  if (!a.model_prefix) std::ofstream(to / "model.safetensors.index.json") << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2);
  EsftAdapterConfig cfg;
  cfg.experts = a.experts;
  cfg.shared_experts = a.shared_experts;
  cfg.non_expert_modules = a.non_expert_modules;
  std::ofstream(to / "expert_cfg.json") << deepseek_expert_cfg_text(cfg, spec);
  return to;
}

std::vector<std::int64_t> prompt_of(std::size_t length, std::uint64_t seed, std::int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> ids(length);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(vocab));
  return ids;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

void expect_mentions(const std::string& message, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) {
    const std::string why = "message \"" + message + "\" does not mention \"" + std::string(p) + "\"";
    QVERIFY2(message.find(p) != std::string::npos, why.c_str());
  }
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace mosaic::test
