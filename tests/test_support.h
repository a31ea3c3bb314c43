#pragma once
// Helpers shared by the suites: where the fixtures are, scratch copies of them, reading
// reference tensors, and checking typed errors together with their messages.
#include <QTest>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/safetensors.h"

// A case whose work is code that other cases of the sanitized suites already take, done many times
// over (a quality check over a domain's text, a plan at five budgets, two dozen argument mistakes,
// each a start of mosaic-cli): skipped, saying so, in the sanitizer builds, where such cases cost CI
// minutes on paths the other cases take there; the Release stage runs it whole. `why` says what
// covers it.
#if defined(__has_feature)  // clang need not define the __SANITIZE_* macros GCC does
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MOSAIC_SANITIZED_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(MOSAIC_SANITIZED_BUILD)
#define MOSAIC_RELEASE_BUILD_ONLY(why) QSKIP("Release build only; under the sanitizers, " why)
#else
#define MOSAIC_RELEASE_BUILD_ONLY(why) static_cast<void>(0)
#endif

namespace mosaic::test {

namespace fs = std::filesystem;

inline fs::path data_dir() { return MOSAIC_TEST_DATA; }
inline fs::path fixture(const std::string& family, const std::string& variant = {}) {
  return variant.empty() ? data_dir() / "hf-tiny" / family : data_dir() / "hf-tiny" / family / variant;
}
inline const std::vector<std::string>& families() {
  static const std::vector<std::string> f{"mixtral", "qwen2_moe", "olmoe"};
  return f;
}
inline const std::vector<std::string>& variants() {
  static const std::vector<std::string> v{"base", "ft1", "ft2", "ft3", "esft1", "esft2"};
  return v;
}

// The whole file's bytes ("" when it cannot be read).
std::string read_text(const fs::path& path);

// Copies a checkpoint folder into `to` (writable), returning `to`.
fs::path copy_checkpoint(const fs::path& from, const fs::path& to);
// Sets `key` of `dir/config.json` to `value` (a copy's: see copy_checkpoint), keeping the rest.
void patch_config(const fs::path& dir, const std::string& key, const nlohmann::json& value);

// Rewrites `dir/model.safetensors` keeping each tensor for which `keep` is true, after letting
// `edit` change its bytes (as stored). Uses the project's own writer.
void rewrite_weights(const fs::path& dir, const std::function<bool(const TensorInfo&)>& keep,
                     const std::function<void(const TensorInfo&, std::vector<std::byte>&)>& edit = {});

// Writes a file of an 8-byte length, `header` verbatim and `data`, for malformed-file tests.
void write_raw_safetensors(const fs::path& path, const std::string& header, std::size_t data_bytes,
                           std::uint64_t declared_header_length = 0);

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name);
std::vector<std::int64_t> read_i64(const SafetensorsFile& f, const std::string& name);

// config.json of a small Qwen3-MoE (no fixture exists): head_dim 32 ≠ hidden/heads, layer 1 dense.
std::string qwen3_moe_config();
// config.json of small DeepSeek models: V2 with a plain q_proj, group_limited_greedy routing, scaled
// weights, two shared experts; V3 with q_lora_rank, sigmoid noaux_tc routing, one shared expert.
// Both: multi-head latent attention, a dense first layer, YaRN (factor 4 over 64 positions).
std::string deepseek_v2_config();
std::string deepseek_v3_config();

// An ESFT adapter folder as DeepSeek releases theirs, over the fp32 checkpoint `base`: expert_cfg.json
// without base_model ({"experts": …, "shared_experts", "non_expert_modules"}, every MoE layer keyed),
// the tuned tensors (the base's, times 1.25, so they differ) named "layers.N.…" in
// model-00001-of-000001.safetensors with its index, or "model.layers.N.…" in model.safetensors
// (train.py's output) when `model_prefix`; the base's config.json beside them. Returns `to`.
struct DeepseekAdapter {
  std::map<std::int64_t, std::vector<std::int64_t>> experts;
  bool shared_experts = false, non_expert_modules = false, model_prefix = false;
};
fs::path make_deepseek_adapter(const fs::path& base, const fs::path& to, const DeepseekAdapter& a);

// ‖a − b‖ / ‖b‖
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

// `length` token ids drawn uniformly from [0, vocab) by a generator seeded with `seed`.
std::vector<std::int64_t> prompt_of(std::size_t length, std::uint64_t seed, std::int64_t vocab);

// Runs `f`; returns the message of the E it threw, or a description of what happened instead.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type> ") + e.what();
  }
  return "<no exception>";
}

// Fails the current test unless `message` contains every part.
void expect_mentions(const std::string& message, std::initializer_list<std::string_view> parts);

}  // namespace mosaic::test
