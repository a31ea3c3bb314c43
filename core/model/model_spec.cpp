#include "model/model_spec.h"

#include "common/text_file.h"

#include "common/json_text.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  bool present(const char* key) const { return j_.contains(key); }  // null included

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

  if (c.has("rope_parameters")) {
    const json& rp = c.raw("rope_parameters");
    if (rp.is_object() && rp.contains("partial_rotary_factor") && rp["partial_rotary_factor"].is_number() &&
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

// transformers' yarn_get_mscale: how much a context `factor` times longer sharpens attention.
double yarn_mscale(double factor, double mscale) { return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

// Rope scaling as transformers reads it (modeling_rope_utils.py): 5.x writes rope_parameters
// {rope_type, rope_theta, …}; 4.x and model authors' own code wrote rope_scaling {type | rope_type, …}.
// default, yarn and llama3 are implemented; any other type is refused.
RopeScaling read_rope_scaling(const ConfigReader& c, std::int64_t max_positions) {
  // Both given (a 4.x config re-saved by 5.x): transformers 5 moves rope_scaling into rope_parameters.
  const char* key = c.has("rope_scaling") ? "rope_scaling" : c.has("rope_parameters") ? "rope_parameters" : nullptr;
  RopeScaling r;
  if (!key) return r;
  const std::string k = key;
  const json& obj = c.raw(key);
  if (!obj.is_object()) throw c.bad(k, "must be an object");
  std::string type = k == "rope_parameters" ? "default" : "";
  for (const char* t : {"rope_type", "type"})
    if (obj.contains(t) && !obj[t].is_null()) {
      if (!obj[t].is_string()) throw c.bad(k + "." + t, "must be a string such as \"default\" or \"yarn\"");
      type = obj[t].get<std::string>();
      break;
    }
  if (type.empty()) throw c.bad(k, "names no rope type (\"type\" or \"rope_type\")");
  if (type == "default") return r;
  auto number = [&](const char* field, double fallback) {
    if (!obj.contains(field) || obj[field].is_null()) return fallback;
    if (!obj[field].is_number()) throw c.bad(k + "." + field, "must be a number");
    const double v = obj[field].get<double>();
    if (!std::isfinite(v)) throw c.bad(k + "." + field, "must be finite");
    return v;
  };
  auto required = [&](const char* field) {
    const double v = number(field, std::numeric_limits<double>::quiet_NaN());
    if (std::isnan(v)) throw c.bad(k + "." + field, "is required by rope type '" + type + "'");
    return v;
  };
  auto positions = [&](double v, const char* field) {
    if (!(v >= 1 && v <= static_cast<double>(kMaxPositions))) throw c.bad(k + "." + field, "must be a positive number of positions");
    return static_cast<std::int64_t>(v);
  };
  if (type == "yarn") {
    r.kind = RopeKind::Yarn;
    r.original_max_positions = positions(number("original_max_position_embeddings", static_cast<double>(max_positions)),
                                         "original_max_position_embeddings");
    r.factor = number("factor", static_cast<double>(max_positions) / static_cast<double>(r.original_max_positions));
    r.beta_fast = number("beta_fast", 0) ? number("beta_fast", 0) : 32;  // Python's `or`: 0 is the default too
    r.beta_slow = number("beta_slow", 0) ? number("beta_slow", 0) : 1;
    if (obj.contains("truncate") && !obj["truncate"].is_null()) {
      if (!obj["truncate"].is_boolean()) throw c.bad(k + ".truncate", "must be true or false");
      r.truncate = obj["truncate"].get<bool>();
    }
    r.mscale = number("mscale", 0);
    r.mscale_all_dim = number("mscale_all_dim", 0);
    // _compute_yarn_parameters: both mscales given → their ratio; else the factor's own.
    const double given = number("attention_factor", std::numeric_limits<double>::quiet_NaN());
    r.attention_factor = !std::isnan(given)                ? given
                         : r.mscale && r.mscale_all_dim ? yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim)
                                                          : yarn_mscale(r.factor, 1.0);
  } else if (type == "llama3") {
    r.kind = RopeKind::Llama3;
    r.factor = required("factor");
    r.low_freq_factor = required("low_freq_factor");
    r.high_freq_factor = required("high_freq_factor");
    r.original_max_positions = positions(required("original_max_position_embeddings"), "original_max_position_embeddings");
    if (!(r.high_freq_factor > r.low_freq_factor))
      throw c.bad(k + ".high_freq_factor", "must be larger than low_freq_factor");
  } else {
    throw c.unsupported(k + ".rope_type", "rope type '" + type + "' is not implemented (Mosaic implements default, yarn and llama3)");
  }
  if (!(r.factor >= 1 && r.factor <= 1e6)) throw c.bad(k + ".factor", "must lie in [1, 1e6]: it is how many times longer the context is");
  if (!(r.attention_factor > 0 && r.attention_factor < 100)) throw c.bad(k + ".attention_factor", "must be a small positive number");
  return r;
}

// DeepSeek-V2/V3's fields (configuration_deepseek_v2.py / _v3.py, and DeepSeek's own
// configuration_deepseek.py), defaulting as transformers does where a field is absent.
void read_deepseek(const ConfigReader& c, const ArchInfo& arch, ModelSpec& s) {
  const bool v3 = arch.arch == Arch::DeepseekV3;
  // Multi-head latent attention. q_lora_rank null (V2-Lite) means a plain q_proj; absent, transformers' 1536.
  LatentAttention a;
  if (c.present("q_lora_rank") && !c.has("q_lora_rank")) a.q_lora_rank = 0;
  else if (c.has("q_lora_rank") && c.raw("q_lora_rank").is_number_integer() && c.raw("q_lora_rank").get<std::int64_t>() == 0) a.q_lora_rank = 0;
  else a.q_lora_rank = c.positive_int_or("q_lora_rank", 1536);
  a.kv_lora_rank = c.positive_int_or("kv_lora_rank", 512);
  a.nope_dim = c.positive_int_or("qk_nope_head_dim", 128, kMaxHeadDim);
  a.rope_dim = c.positive_int_or("qk_rope_head_dim", 64, kMaxHeadDim);
  a.v_dim = c.positive_int_or("v_head_dim", 128, kMaxHeadDim);
  if (a.rope_dim % 2 != 0) throw c.bad("qk_rope_head_dim", "must be even for rotary embeddings");
  s.mla = a;
  s.head_dim = a.nope_dim + a.rope_dim;
  // MLA makes keys and values for every head: transformers' repeat_kv fails for any other count.
  if (s.num_kv_heads != s.num_heads)
    throw c.bad("num_key_value_heads", "must equal num_attention_heads (" + std::to_string(s.num_heads) + ") in DeepSeek's latent attention");
  s.qkv_bias = s.o_bias = c.boolean("attention_bias", false);  // q_a_proj / kv_a_proj_with_mqa and o_proj
  // V2 pairs rotary dimensions as DeepSeek's weights do (complex pairs); V3 too unless rope_interleave is false.
  s.rope_interleaved = v3 ? c.boolean("rope_interleave", true) : true;

  // Which layers are MoE: from first_k_dense_replace, every moe_layer_freq-th (DeepSeek's own
  // modeling_deepseek.py; transformers ignores moe_layer_freq, which every released config sets to 1).
  const std::int64_t dense_first = c.int_or("first_k_dense_replace", 0);
  const std::int64_t every = c.positive_int_or("moe_layer_freq", 1, kMaxLayers);
  if (dense_first < 0 || dense_first > s.num_layers) throw c.bad("first_k_dense_replace", "must lie in [0, num_hidden_layers]");
  for (std::int64_t l = 0; l < s.num_layers; ++l) s.sparse_layers[static_cast<std::size_t>(l)] = l >= dense_first && l % every == 0;
  if (s.num_sparse_layers() < s.num_layers) s.dense_intermediate = c.positive_int("intermediate_size");

  // Shared experts: n_shared_experts of moe_intermediate_size, fused into one MLP, added without a gate.
  const std::int64_t shared = c.present("n_shared_experts") && !c.has("n_shared_experts") ? 0 : c.int_or("n_shared_experts", v3 ? 1 : 2);
  if (shared < 0 || shared > 64) throw c.bad("n_shared_experts", "must lie in [0, 64]");
  s.shared_expert_intermediate = shared * s.expert_intermediate;
  s.shared_expert_gated = false;

  // The router.
  const std::string scoring = c.string("scoring_func", v3 ? "sigmoid" : "softmax");
  if (scoring != (v3 ? "sigmoid" : "softmax"))
    throw c.unsupported("scoring_func", "is '" + scoring + "'; transformers' " + std::string(arch.model_type) + " scores with " +
                                           (v3 ? "sigmoid" : "softmax") + " whatever it says");
  s.router_scoring = v3 ? RouterScoring::Sigmoid : RouterScoring::Softmax;
  s.routed_scaling_factor = c.number("routed_scaling_factor", v3 ? 2.5 : 1.0);
  if (!(s.routed_scaling_factor > 0 && s.routed_scaling_factor <= 1e3)) throw c.bad("routed_scaling_factor", "must lie in (0, 1000]");
  const std::string method = c.string("topk_method", v3 ? "noaux_tc" : "greedy");
  auto groups = [&](std::int64_t n_default, std::int64_t top_default) {
    s.n_group = c.positive_int_or("n_group", n_default, kMaxExperts);
    s.topk_group = c.positive_int_or("topk_group", top_default, kMaxExperts);
    if (s.num_experts % s.n_group != 0) throw c.bad("n_group", "must divide the " + std::to_string(s.num_experts) + " routed experts");
    if (s.topk_group > s.n_group) throw c.bad("topk_group", "is more than n_group (" + std::to_string(s.n_group) + ")");
    if (s.topk_group * (s.num_experts / s.n_group) < s.top_k)
      throw c.bad("topk_group", "leaves fewer experts than num_experts_per_tok to choose from");
  };
  if (v3) {
    if (method != "noaux_tc") throw c.unsupported("topk_method", "is '" + method + "'; deepseek_v3 routes with noaux_tc (sigmoid scores, biased group choice)");
    s.expert_choice = ExpertChoice::GroupTopTwo;
    s.router_bias = true;
    groups(8, 4);
    if (s.num_experts / s.n_group < 2) throw c.bad("n_group", "leaves groups of one expert; a group's score is the sum of its two best");
    // Its multi-token-prediction layer (model.layers.<num_hidden_layers>.*) is left unread, as transformers does.
    s.mtp_layers = c.int_or("num_nextn_predict_layers", c.int_or("num_mtp_layers", 0));
    if (s.mtp_layers < 0 || s.mtp_layers > 16) throw c.bad("num_nextn_predict_layers", "must lie in [0, 16]");
    s.norm_topk_prob = c.boolean("norm_topk_prob", true);
  } else {
    if (method == "greedy" || method == "gready") {  // "gready": DeepSeek's own class default, a typo it shipped
      s.expert_choice = ExpertChoice::TopK;
    } else if (method == "group_limited_greedy") {
      s.expert_choice = ExpertChoice::GroupMax;
      groups(1, 1);
    } else {
      throw c.unsupported("topk_method", "is '" + method + "'; deepseek_v2 routes with greedy or group_limited_greedy");
    }
    // transformers ignores it for V2 (the weights are only scaled); DeepSeek's own code renormalizes
    // instead. Every released V2 config says false; true would mean two different models.
    if (c.boolean("norm_topk_prob", false))
      throw c.unsupported("norm_topk_prob", "is true: transformers' deepseek_v2 ignores it while DeepSeek's own code renormalizes the weights");
    s.norm_topk_prob = false;
  }
}

}  // namespace

std::string_view ModelSpec::model_type() const { return arch_info(arch).model_type; }

double ModelSpec::softmax_scale() const { return attention_mscale / std::sqrt(static_cast<double>(head_dim)); }

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
  if (arch->latent_attention) {
    // head_dim follows from MLA's parts (read below); transformers overwrites any head_dim given.
  } else if (s.arch == Arch::Qwen3Moe) {
    s.head_dim = c.positive_int("head_dim", kMaxHeadDim);  // Qwen3 decouples head_dim from hidden_size
  } else if (c.has("head_dim")) {
    s.head_dim = c.positive_int("head_dim", kMaxHeadDim);
  } else {
    if (s.hidden_size % s.num_heads != 0)
      throw c.bad("hidden_size", "must be divisible by num_attention_heads when head_dim is not given");
    s.head_dim = s.hidden_size / s.num_heads;
  }
  if (!arch->latent_attention && s.head_dim % 2 != 0) throw c.bad("head_dim", "must be even for rotary embeddings");

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
  if (arch->latent_attention) read_deepseek(c, *arch, s);
  // 0: no shared expert; else bounded like every other size.
  if (s.arch == Arch::Qwen2Moe && c.has("shared_expert_intermediate_size") &&
      !(c.raw("shared_expert_intermediate_size").is_number_integer() && c.raw("shared_expert_intermediate_size") == 0))
    s.shared_expert_intermediate = c.positive_int("shared_expert_intermediate_size");

  if (s.arch == Arch::Qwen2Moe) {
    s.qkv_bias = c.boolean("qkv_bias", arch->qkv_bias_default);
  } else if (s.arch != Arch::Mixtral && !arch->latent_attention) {
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
  s.rope_scaling = read_rope_scaling(c, s.max_position_embeddings);
  if (c.has("quantization_config")) {
    const json& q = c.raw("quantization_config");
    const auto m = q.is_object() ? q.find("quant_method") : q.end();
    s.quantization = m != q.end() && m->is_string() && !m->get<std::string>().empty() ? m->get<std::string>() : "unnamed";
  }
  // DeepSeek's attention sharpens its softmax by yarn's mscale(factor, mscale_all_dim)² where the rope
  // is scaled (transformers' yarn_apply_mscale; DeepSeek's own DeepseekV2Attention).
  if (arch->latent_attention && s.rope_scaling.kind != RopeKind::Default && s.rope_scaling.mscale_all_dim != 0) {
    const double m = yarn_mscale(s.rope_scaling.factor, s.rope_scaling.mscale_all_dim);
    s.attention_mscale = m * m;
  }
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
  json rope = {{"rope_type", "default"}, {"rope_theta", s.rope_theta}};
  const RopeScaling& r = s.rope_scaling;
  if (r.kind == RopeKind::Yarn) {
    rope["rope_type"] = "yarn";
    rope.update({{"factor", r.factor}, {"original_max_position_embeddings", r.original_max_positions}, {"beta_fast", r.beta_fast},
                 {"beta_slow", r.beta_slow}, {"truncate", r.truncate}});
    if (r.mscale) rope["mscale"] = r.mscale;
    if (r.mscale_all_dim) rope["mscale_all_dim"] = r.mscale_all_dim;
  } else if (r.kind == RopeKind::Llama3) {
    rope.update({{"rope_type", "llama3"}, {"factor", r.factor}, {"low_freq_factor", r.low_freq_factor},
                 {"high_freq_factor", r.high_freq_factor}, {"original_max_position_embeddings", r.original_max_positions}});
  }
  j["rope_parameters"] = rope;
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
    case Arch::DeepseekV2:
    case Arch::DeepseekV3: {
      const LatentAttention& a = *s.mla;
      j.erase("head_dim");  // transformers derives it (qk_rope_head_dim)
      j["n_routed_experts"] = s.num_experts;
      j["moe_intermediate_size"] = s.expert_intermediate;
      j["intermediate_size"] = s.dense_intermediate > 0 ? s.dense_intermediate : s.expert_intermediate;
      j["n_shared_experts"] = s.expert_intermediate ? s.shared_expert_intermediate / s.expert_intermediate : 0;
      std::int64_t dense_first = 0;
      while (dense_first < s.num_layers && !s.is_sparse(dense_first)) ++dense_first;
      j["first_k_dense_replace"] = dense_first;
      j["moe_layer_freq"] = 1;
      j["q_lora_rank"] = a.q_lora_rank ? json(a.q_lora_rank) : json(nullptr);
      j["kv_lora_rank"] = a.kv_lora_rank;
      j["qk_nope_head_dim"] = a.nope_dim;
      j["qk_rope_head_dim"] = a.rope_dim;
      j["v_head_dim"] = a.v_dim;
      j["attention_bias"] = s.qkv_bias;
      j["routed_scaling_factor"] = s.routed_scaling_factor;
      j["norm_topk_prob"] = s.norm_topk_prob;
      j["n_group"] = s.n_group;
      j["topk_group"] = s.topk_group;
      if (s.arch == Arch::DeepseekV3) {
        j["topk_method"] = "noaux_tc";
        j["scoring_func"] = "sigmoid";
        j["rope_interleave"] = s.rope_interleaved;
      } else {
        j["topk_method"] = s.expert_choice == ExpertChoice::GroupMax ? "group_limited_greedy" : "greedy";
        j["scoring_func"] = "softmax";
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
  check("shared expert gated", a.shared_expert_gated, b.shared_expert_gated);
  check("router scoring", static_cast<int>(a.router_scoring), static_cast<int>(b.router_scoring));
  check("topk_method", static_cast<int>(a.expert_choice), static_cast<int>(b.expert_choice));
  check("n_group", a.n_group, b.n_group);
  check("topk_group", a.topk_group, b.topk_group);
  check("routed_scaling_factor", a.routed_scaling_factor, b.routed_scaling_factor);
  check("e_score_correction_bias", a.router_bias, b.router_bias);
  check("attention (latent or not)", a.mla.has_value(), b.mla.has_value());
  if (a.mla && b.mla) {
    check("q_lora_rank", a.mla->q_lora_rank, b.mla->q_lora_rank);
    check("kv_lora_rank", a.mla->kv_lora_rank, b.mla->kv_lora_rank);
    check("qk_nope_head_dim", a.mla->nope_dim, b.mla->nope_dim);
    check("qk_rope_head_dim", a.mla->rope_dim, b.mla->rope_dim);
    check("v_head_dim", a.mla->v_dim, b.mla->v_dim);
  }
  check("rope type", static_cast<int>(a.rope_scaling.kind), static_cast<int>(b.rope_scaling.kind));
  check("rope factor", a.rope_scaling.factor, b.rope_scaling.factor);
  check("rope original_max_position_embeddings", a.rope_scaling.original_max_positions, b.rope_scaling.original_max_positions);
  check("rope attention factor", a.rope_scaling.attention_factor, b.rope_scaling.attention_factor);
  check("rope_interleave", a.rope_interleaved, b.rope_interleaved);
  check("attention mscale", a.attention_mscale, b.attention_mscale);
  for (std::int64_t l = 0; !diff && l < a.num_layers; ++l)
    check(("layer " + std::to_string(l) + " is MoE").c_str(), a.is_sparse(l), b.is_sparse(l));
  return diff;
}

}  // namespace mosaic
