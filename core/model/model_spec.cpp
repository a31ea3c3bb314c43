#include "model/model_spec.h"

#include "common/text_file.h"

#include "common/json_text.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"

namespace mosaic {
namespace {

using nlohmann::json;

// Reads fields of one config.json with errors that name the file and the field.
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  // Sizes are bounded before anything is allocated from them: a config that asks for more than any
  // model has is a mistake (or an attack), refused naming the field, never an out-of-memory.
  std::int64_t positive_int(const char* key, std::int64_t max = kMaxSize) const {
    if (!has(key)) throw MissingError(source_, std::string("field '") + key + "'", "is required but absent",
                                      "add it to config.json; transformers writes it for every model");
    return positive_int_value(key, j_.at(key), max);
  }
  std::int64_t positive_int_or(const char* key, std::int64_t fallback, std::int64_t max = kMaxSize) const {
    return has(key) ? positive_int_value(key, j_.at(key), max) : fallback;
  }
  // A field transformers spells two ways: either is read; both must agree.
  std::int64_t positive_int_either(std::string_view key, std::string_view alias, std::int64_t max) const {
    const std::string k(key), a(alias);
    if (has(k.c_str()) && has(a.c_str()) && j_.at(k) != j_.at(a))
      throw bad(k, "is " + j_.at(k).dump() + " but '" + a + "', its other spelling, is " + j_.at(a).dump() + ": keep one");
    if (has(a.c_str()) && !has(k.c_str())) return positive_int(a.c_str(), max);
    if (!has(k.c_str()))
      throw MissingError(source_, "field '" + k + "'", "is required but absent (nor is '" + a + "', its other spelling)",
                         "add it to config.json; transformers writes it for every model");
    return positive_int(k.c_str(), max);
  }
  std::int64_t int_or(const char* key, std::int64_t fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number_integer()) throw bad(key, "must be an integer");
    return j_.at(key).get<std::int64_t>();
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number()) throw bad(key, "must be a number");
    return j_.at(key).get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) throw bad(key, "must be true or false");
    return j_.at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) throw bad(key, "must be a string");
    return j_.at(key).get<std::string>();
  }
  std::vector<std::int64_t> int_list(const char* key) const {  // an int, a list of ints, or absent
    std::vector<std::int64_t> out;
    if (!has(key)) return out;
    const json& v = j_.at(key);
    if (v.is_number_integer()) return {v.get<std::int64_t>()};
    if (!v.is_array()) throw bad(key, "must be an integer or a list of integers");
    for (const json& x : v) {
      if (!x.is_number_integer()) throw bad(key, "must be an integer or a list of integers");
      out.push_back(x.get<std::int64_t>());
    }
    return out;
  }
  const json& raw(const char* key) const { return j_.at(key); }

  FormatError bad(const std::string& key, const std::string& what) const {
    return FormatError(source_, "field '" + key + "'", what, "fix the value in config.json");
  }
  UnsupportedError unsupported(const std::string& key, const std::string& what) const {
    return UnsupportedError(source_, "field '" + key + "'", what,
                            "Mosaic implements this model without it; an engine that ignored it would "
                            "compute a silently wrong model");
  }

 private:
  std::int64_t positive_int_value(const char* key, const json& v, std::int64_t max) const {
    if (!v.is_number_integer()) throw bad(key, "must be a positive integer");
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(max) : v.get<std::int64_t>() > max)
      throw bad(key, "is " + v.dump() + ", more than any model has (Mosaic reads at most " + std::to_string(max) + ")");
    if (v.get<std::int64_t>() <= 0) throw bad(key, "must be a positive integer");
    return v.get<std::int64_t>();
  }
  static constexpr std::int64_t kMaxSize = std::int64_t{1} << 20;  // intermediate sizes
  const json& j_;
  std::string source_;
};

// What any real model stays within (the largest today are a few times below each).
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24, kMaxHidden = std::int64_t{1} << 17, kMaxLayers = 1024, kMaxHeads = 1024,
                       kMaxHeadDim = 1024, kMaxExperts = std::int64_t{1} << 16, kMaxPositions = std::int64_t{1} << 24;

// Options that change the computation and that the engine does not implement are refused.
void refuse_unimplemented(const ConfigReader& c, const ArchInfo& arch) {
  if (c.string("hidden_act", "silu") != "silu")
    throw c.unsupported("hidden_act", "is '" + c.string("hidden_act", "") + "'; only 'silu' (SwiGLU) is implemented");

  // Rope: transformers 5 writes rope_parameters {rope_type, rope_theta}; 4.x wrote rope_scaling.
  // A rope type is read by type: json::value() throws the JSON library's error for a number or null.
  auto rope_type = [&](const json& obj, const std::string& parent, const std::string& fallback) {
    for (const char* key : {"rope_type", "type"})
      if (obj.contains(key)) {
        if (!obj[key].is_string()) throw c.bad(parent + "." + key, "must be a string such as \"default\"");
        return obj[key].get<std::string>();
      }
    return fallback;
  };
  if (c.has("rope_scaling")) {
    const json& rs = c.raw("rope_scaling");
    const std::string type = rs.is_object() ? rope_type(rs, "rope_scaling", "?") : "?";
    if (type != "default") throw c.unsupported("rope_scaling", "rope scaling '" + type + "' is not implemented");
  }
  if (c.has("rope_parameters")) {
    const json& rp = c.raw("rope_parameters");
    if (!rp.is_object()) throw c.bad("rope_parameters", "must be an object");
    const std::string type = rope_type(rp, "rope_parameters", "default");
    if (type != "default") throw c.unsupported("rope_parameters.rope_type", "rope type '" + type + "' is not implemented");
    if (rp.contains("partial_rotary_factor") && rp["partial_rotary_factor"].is_number() &&
        rp["partial_rotary_factor"].get<double>() != 1.0)
      throw c.unsupported("rope_parameters.partial_rotary_factor", "partial rotary embeddings are not implemented");
  }
  if (c.number("partial_rotary_factor", 1.0) != 1.0)
    throw c.unsupported("partial_rotary_factor", "partial rotary embeddings are not implemented");

  // Sliding-window attention.
  if (arch.arch == Arch::Mixtral && c.has("sliding_window"))
    throw c.unsupported("sliding_window", "sliding-window attention is not implemented; set it to null for full attention");
  if (c.boolean("use_sliding_window", false))
    throw c.unsupported("use_sliding_window", "sliding-window attention is not implemented");
  if (c.has("layer_types")) {
    const json& lt = c.raw("layer_types");
    if (!lt.is_array()) throw c.bad("layer_types", "must be a list");
    for (const json& t : lt)
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        throw c.unsupported("layer_types", "only 'full_attention' layers are implemented");
  }
}

}  // namespace

std::string_view ModelSpec::model_type() const { return arch_info(arch).model_type; }

std::int64_t ModelSpec::num_sparse_layers() const {
  return std::count(sparse_layers.begin(), sparse_layers.end(), true);
}

ModelSpec parse_model_spec(std::string_view text, const std::string& source) {
  json j;
  try {
    j = parse_json_bounded(text, source);
  } catch (const json::exception& e) {
    throw FormatError(source, "", std::string("not valid JSON: ") + e.what(), "fix or re-save config.json");
  }
  if (!j.is_object()) throw FormatError(source, "", "is not a JSON object", "fix or re-save config.json");
  const ConfigReader c(j, source);

  const std::string model_type = c.string("model_type", "");
  const ArchInfo* arch = find_arch(model_type);
  if (!arch) {
    std::string known;
    for (const ArchInfo& a : supported_archs()) known += (known.empty() ? "" : ", ") + std::string(a.model_type);
    throw UnsupportedError(source, "field 'model_type'",
                           model_type.empty() ? "is missing" : "'" + model_type + "' is not supported",
                           "Mosaic serves " + known);
  }
  refuse_unimplemented(c, *arch);

  ModelSpec s;
  s.arch = arch->arch;
  s.vocab_size = c.positive_int("vocab_size", kMaxVocab);
  s.hidden_size = c.positive_int("hidden_size", kMaxHidden);
  s.num_layers = c.positive_int("num_hidden_layers", kMaxLayers);
  s.num_heads = c.positive_int("num_attention_heads", kMaxHeads);
  s.num_kv_heads = c.positive_int_or("num_key_value_heads", s.num_heads, kMaxHeads);
  if (s.num_heads % s.num_kv_heads != 0)
    throw c.bad("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(s.num_heads) + ")");
  if (s.arch == Arch::Qwen3Moe) {
    s.head_dim = c.positive_int("head_dim", kMaxHeadDim);  // Qwen3 decouples head_dim from hidden_size
  } else if (c.has("head_dim")) {
    s.head_dim = c.positive_int("head_dim", kMaxHeadDim);
  } else {
    if (s.hidden_size % s.num_heads != 0)
      throw c.bad("hidden_size", "must be divisible by num_attention_heads when head_dim is not given");
    s.head_dim = s.hidden_size / s.num_heads;
  }
  if (s.head_dim % 2 != 0) throw c.bad("head_dim", "must be even for rotary embeddings");

  s.num_experts = c.positive_int_either(arch->experts_key, arch->experts_alias, kMaxExperts);
  s.expert_intermediate = c.positive_int(s.arch == Arch::Mixtral || s.arch == Arch::Olmoe ? "intermediate_size" : "moe_intermediate_size");
  s.top_k = c.positive_int("num_experts_per_tok", kMaxExperts);
  if (s.top_k > s.num_experts)
    throw c.bad("num_experts_per_tok", "is larger than the number of experts (" + std::to_string(s.num_experts) + ")");
  s.norm_topk_prob = arch->always_norm_topk || c.boolean("norm_topk_prob", false);

  // Which layers are MoE: Qwen's mlp_only_layers and decoder_sparse_step; the others are all MoE.
  s.sparse_layers.assign(static_cast<std::size_t>(s.num_layers), true);
  if (s.arch == Arch::Qwen2Moe || s.arch == Arch::Qwen3Moe) {
    const std::int64_t step = c.positive_int_or("decoder_sparse_step", 1, s.num_layers);
    for (std::int64_t l = 0; l < s.num_layers; ++l) s.sparse_layers[l] = (l + 1) % step == 0;
    for (std::int64_t l : c.int_list("mlp_only_layers")) {
      if (l < 0 || l >= s.num_layers) throw c.bad("mlp_only_layers", "names layer " + std::to_string(l) + ", which does not exist");
      s.sparse_layers[l] = false;
    }
    if (s.num_sparse_layers() < s.num_layers) s.dense_intermediate = c.positive_int("intermediate_size");
  }
  // 0: no shared expert; else bounded like every other size.
  if (arch->has_shared_expert && c.has("shared_expert_intermediate_size") &&
      !(c.raw("shared_expert_intermediate_size").is_number_integer() && c.raw("shared_expert_intermediate_size") == 0))
    s.shared_expert_intermediate = c.positive_int("shared_expert_intermediate_size");

  if (s.arch == Arch::Qwen2Moe) {
    s.qkv_bias = c.boolean("qkv_bias", arch->qkv_bias_default);
  } else if (s.arch != Arch::Mixtral) {
    s.qkv_bias = s.o_bias = c.boolean("attention_bias", false);
  }
  s.qk_norm = arch->qk_norm;
  if (s.arch == Arch::Olmoe && c.has("clip_qkv")) s.clip_qkv = c.number("clip_qkv", 0.0);

  s.rms_norm_eps = c.number("rms_norm_eps", arch->default_rms_eps);
  if (!(s.rms_norm_eps > 0 && s.rms_norm_eps < 1)) throw c.bad("rms_norm_eps", "must lie in (0, 1): it is a small constant added to a variance");
  s.rope_theta = c.number("rope_theta", arch->default_rope_theta);
  if (c.has("rope_parameters") && c.raw("rope_parameters").contains("rope_theta")) {
    const json& t = c.raw("rope_parameters")["rope_theta"];
    if (!t.is_number()) throw c.bad("rope_parameters.rope_theta", "must be a number");
    s.rope_theta = t.get<double>();
  }
  if (!(s.rope_theta > 0 && s.rope_theta <= 1e12))
    throw c.bad(c.has("rope_parameters") && c.raw("rope_parameters").contains("rope_theta") ? "rope_parameters.rope_theta" : "rope_theta",
                "must be positive and at most 1e12 (models use 1e4 to 1e7)");
  s.max_position_embeddings = c.positive_int_or("max_position_embeddings", arch->default_max_positions, kMaxPositions);
  s.tie_word_embeddings = c.boolean("tie_word_embeddings", false);
  if (c.has("bos_token_id")) s.bos_token_id = c.int_or("bos_token_id", 0);
  s.eos_token_ids = c.int_list("eos_token_id");
  // An id outside the vocabulary is no token's: as a stop id it can never be sampled, so generation
  // would silently run to its length. (transformers writes such configs when a model is shrunk
  // without its ids: OlmoeConfig's default eos 50279 over a 320-token vocabulary.)
  const auto check_id = [&](const char* key, std::int64_t id) {
    if (id < 0 || id >= s.vocab_size)
      throw c.bad(key, std::to_string(id) + " is not a token of the " + std::to_string(s.vocab_size) +
                           "-token vocabulary (set it to the model's own id, or null for none)");
  };
  for (std::int64_t id : s.eos_token_ids) check_id("eos_token_id", id);
  if (s.bos_token_id) check_id("bos_token_id", *s.bos_token_id);
  // The dtype the weights are said to be in (transformers 4.x torch_dtype, 5.x dtype); the weights'
  // own dtypes are what is read, but a dtype no checkpoint Mosaic reads can hold is a wrong config.
  for (const char* key : {"torch_dtype", "dtype"}) {
    const std::string d = c.string(key, "auto");
    if (d != "auto" && d != "float32" && d != "float" && d != "float16" && d != "half" && d != "bfloat16")
      throw c.unsupported(key, "is '" + d + "'; Mosaic reads float32, float16 and bfloat16 checkpoints");
  }
  return s;
}

ModelSpec load_model_spec(const std::filesystem::path& path) {
  require_regular_file(path, "a checkpoint folder needs its config.json");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MissingError(path.string(), "", "cannot be read", "a checkpoint folder needs its config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_spec(ss.str(), path.string());
}

std::string to_config_json(const ModelSpec& s) {
  json j;
  j["model_type"] = std::string(s.model_type());
  j["vocab_size"] = s.vocab_size;
  j["hidden_size"] = s.hidden_size;
  j["num_hidden_layers"] = s.num_layers;
  j["num_attention_heads"] = s.num_heads;
  j["num_key_value_heads"] = s.num_kv_heads;
  j["head_dim"] = s.head_dim;
  j["num_experts_per_tok"] = s.top_k;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = s.rms_norm_eps;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", s.rope_theta}};
  j["max_position_embeddings"] = s.max_position_embeddings;
  j["tie_word_embeddings"] = s.tie_word_embeddings;
  if (s.bos_token_id) j["bos_token_id"] = *s.bos_token_id;
  if (!s.eos_token_ids.empty()) j["eos_token_id"] = s.eos_token_ids.size() == 1 ? json(s.eos_token_ids[0]) : json(s.eos_token_ids);
  switch (s.arch) {
    case Arch::Mixtral:
      j["num_local_experts"] = s.num_experts;
      j["intermediate_size"] = s.expert_intermediate;
      j["sliding_window"] = nullptr;
      break;
    case Arch::Olmoe:
      j["num_experts"] = s.num_experts;
      j["intermediate_size"] = s.expert_intermediate;
      j["norm_topk_prob"] = s.norm_topk_prob;
      j["attention_bias"] = s.qkv_bias;
      j["clip_qkv"] = s.clip_qkv ? json(*s.clip_qkv) : json(nullptr);
      break;
    case Arch::Qwen2Moe:
    case Arch::Qwen3Moe: {
      j["num_experts"] = s.num_experts;
      j["moe_intermediate_size"] = s.expert_intermediate;
      j["intermediate_size"] = s.dense_intermediate > 0 ? s.dense_intermediate : s.expert_intermediate;
      j["norm_topk_prob"] = s.norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      std::vector<std::int64_t> dense;
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        if (!s.is_sparse(l)) dense.push_back(l);
      j["mlp_only_layers"] = dense;
      if (s.arch == Arch::Qwen2Moe) {
        j["shared_expert_intermediate_size"] = s.shared_expert_intermediate;
        j["qkv_bias"] = s.qkv_bias;
      } else {
        j["attention_bias"] = s.qkv_bias;
      }
      break;
    }
  }
  return j.dump(1) + "\n";
}

std::optional<std::string> first_difference(const ModelSpec& a, const ModelSpec& b) {
  auto str = [](const auto& v) -> std::string {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    else if constexpr (std::is_same_v<T, std::string_view>) return std::string(v);
    else return std::to_string(v);
  };
  std::optional<std::string> diff;
  auto check = [&](const char* field, const auto& x, const auto& y) {
    if (!diff && !(x == y)) diff = std::string(field) + ": " + str(x) + " vs " + str(y);
  };
  check("model_type", a.model_type(), b.model_type());
  check("vocab_size", a.vocab_size, b.vocab_size);
  check("hidden_size", a.hidden_size, b.hidden_size);
  check("num_hidden_layers", a.num_layers, b.num_layers);
  check("num_attention_heads", a.num_heads, b.num_heads);
  check("num_key_value_heads", a.num_kv_heads, b.num_kv_heads);
  check("head_dim", a.head_dim, b.head_dim);
  check("num_experts", a.num_experts, b.num_experts);
  check("num_experts_per_tok", a.top_k, b.top_k);
  check("norm_topk_prob", a.norm_topk_prob, b.norm_topk_prob);
  check("moe_intermediate_size", a.expert_intermediate, b.expert_intermediate);
  check("intermediate_size (dense layers)", a.dense_intermediate, b.dense_intermediate);
  check("shared_expert_intermediate_size", a.shared_expert_intermediate, b.shared_expert_intermediate);
  check("qkv_bias", a.qkv_bias, b.qkv_bias);
  check("o_bias", a.o_bias, b.o_bias);
  check("clip_qkv", a.clip_qkv.value_or(0.0), b.clip_qkv.value_or(0.0));
  check("rope_theta", a.rope_theta, b.rope_theta);
  check("rms_norm_eps", a.rms_norm_eps, b.rms_norm_eps);
  check("tie_word_embeddings", a.tie_word_embeddings, b.tie_word_embeddings);
  for (std::int64_t l = 0; !diff && l < a.num_layers; ++l)
    check(("layer " + std::to_string(l) + " is MoE").c_str(), a.is_sparse(l), b.is_sparse(l));
  return diff;
}

}  // namespace mosaic
