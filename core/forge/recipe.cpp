#include "forge/recipe.h"

#include "common/json_text.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text_file.h"

namespace mosaic {
namespace {

using nlohmann::json;

struct RecipeReader {
  const std::string& source;

  template <class T>
  T get(const json& j, const std::string& field, const std::string& path, T fallback) const {
    if (!j.contains(field)) return fallback;
    try {
      return j.at(field).get<T>();
    } catch (const json::exception&) {
      throw FormatError(source, path + field, "has the wrong type (" + j.at(field).dump() + ")");
    }
  }
  std::int64_t positive(const json& j, const std::string& field, const std::string& path, std::int64_t fallback) const {
    const auto v = get<std::int64_t>(j, field, path, fallback);
    if (v <= 0) throw FormatError(source, path + field, "must be positive, not " + std::to_string(v));
    return v;
  }
  StageConfig stage(const json& j, const std::string& path, double lr) const {
    StageConfig s;
    s.steps = get<std::int64_t>(j, "steps", path, 0);
    if (s.steps < 0) throw FormatError(source, path + "steps", "must not be negative");
    s.opt.lr = get<double>(j, "lr", path, lr);
    s.opt.warmup_steps = get<std::int64_t>(j, "warmup", path, std::min<std::int64_t>(50, s.steps / 10 + 1));
    s.opt.min_lr_fraction = get<double>(j, "min_lr_fraction", path, 0.1);
    s.opt.weight_decay = get<double>(j, "weight_decay", path, 0.01);
    s.opt.aux_loss_coef = get<double>(j, "aux_loss_coef", path, 0.01);
    s.opt.grad_clip = get<double>(j, "grad_clip", path, 1.0);
    if (!(s.opt.lr > 0)) throw FormatError(source, path + "lr", "must be positive");
    return s;
  }
};

}  // namespace

ForgeRecipe parse_recipe(const std::string& text, const std::string& source) {
  json j;
  try {
    j = parse_json_bounded(text, source);
  } catch (const json::exception& e) {
    throw FormatError(source, "", std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", std::string()) != "mosaic.forge/1")
    throw FormatError(source, "format", "is not \"mosaic.forge/1\"", "start from sample_configs/forge-sample.json");
  const RecipeReader r{source};
  ForgeRecipe f;
  f.text = text;
  f.output = r.get<std::string>(j, "output", "", "");
  if (f.output.empty()) throw FormatError(source, "output", "is missing: the folder the family is written to");
  f.work_dir = r.get<std::string>(j, "work_dir", "", (f.output.parent_path() / (f.output.filename().string() + ".work")).string());
  f.seed = r.get<std::uint64_t>(j, "seed", "", 1);

  const json tok = j.value("tokenizer", json::object());
  f.vocab_size = r.positive(tok, "vocab_size", "tokenizer.", 1024);
  f.tokenizer_sample_bytes = r.positive(tok, "sample_bytes", "tokenizer.", 2'000'000);

  const json m = j.value("model", json::object());
  ModelSpec& s = f.spec;
  s.arch = Arch::Mixtral;
  s.vocab_size = f.vocab_size;
  s.hidden_size = r.positive(m, "hidden_size", "model.", 128);
  s.num_layers = r.positive(m, "num_layers", "model.", 4);
  s.num_heads = r.positive(m, "num_heads", "model.", 4);
  s.num_kv_heads = r.positive(m, "num_kv_heads", "model.", 2);
  if (s.hidden_size % s.num_heads || s.num_heads % s.num_kv_heads)
    throw FormatError(source, "model.num_heads", "must divide hidden_size, and num_kv_heads must divide it");
  s.head_dim = s.hidden_size / s.num_heads;
  s.num_experts = r.positive(m, "num_experts", "model.", 8);
  s.top_k = r.positive(m, "top_k", "model.", 2);
  if (s.top_k > s.num_experts) throw FormatError(source, "model.top_k", "exceeds num_experts");
  s.norm_topk_prob = true;
  s.expert_intermediate = r.positive(m, "expert_intermediate", "model.", 256);
  s.rope_theta = r.get<double>(m, "rope_theta", "model.", 10000.0);
  s.rms_norm_eps = 1e-5;
  s.max_position_embeddings = r.positive(m, "max_position_embeddings", "model.", 1024);
  s.sparse_layers.assign(static_cast<std::size_t>(s.num_layers), true);
  s.bos_token_id = 1;  // forge's tokenizer: <pad> <s> </s>, then bytes
  s.eos_token_ids = {2};

  const json t = j.value("train", json::object());
  f.seq_len = r.positive(t, "seq_len", "train.", 128);
  f.batch = r.positive(t, "batch", "train.", 16);
  f.save_every = r.positive(t, "save_every", "train.", 50);
  f.log_every = r.positive(t, "log_every", "train.", 10);
  f.eval_windows = r.positive(t, "eval_windows", "train.", 32);
  if (f.seq_len >= s.max_position_embeddings)
    throw FormatError(source, "train.seq_len", "must be below model.max_position_embeddings");

  f.base = r.stage(j.value("base", json::object()), "base.", 3e-3);
  f.finetune = r.stage(j.value("finetune", json::object()), "finetune.", 1e-3);
  const json e = j.value("esft", json::object());
  f.esft.stage = r.stage(e, "esft.", 1e-3);
  f.esft.criterion = r.get<std::string>(e, "criterion", "esft.", "gate");
  if (f.esft.criterion != "gate" && f.esft.criterion != "token")
    throw FormatError(source, "esft.criterion", "is neither \"gate\" nor \"token\"");
  f.esft.threshold = r.get<double>(e, "threshold", "esft.", 0.2);
  if (!(f.esft.threshold > 0 && f.esft.threshold <= 1)) throw FormatError(source, "esft.threshold", "must be in (0, 1]");
  f.esft.stats_batches = r.positive(e, "stats_batches", "esft.", 8);

  if (!j.contains("domains") || !j["domains"].is_array() || j["domains"].empty())
    throw FormatError(source, "domains", "must list at least one domain");
  for (std::size_t i = 0; i < j["domains"].size(); ++i) {
    const json& d = j["domains"][i];
    const std::string path = "domains[" + std::to_string(i) + "].";
    DomainSpec ds;
    ds.name = r.get<std::string>(d, "name", path, "");
    if (ds.name.empty() || ds.name.find_first_of("/ .") != std::string::npos || ds.name == "base")
      throw FormatError(source, path + "name", "must be a plain name other than 'base' (it names a folder)");
    for (const DomainSpec& other : f.domains)
      if (other.name == ds.name) throw FormatError(source, path + "name", "'" + ds.name + "' is used twice");
    ds.package = r.get<std::string>(d, "package", path, "");
    ds.max_bytes = r.positive(d, "max_bytes", path, 2'000'000);
    ds.heldout_every = r.positive(d, "heldout_every", path, 20);
    if (ds.heldout_every < 2) throw FormatError(source, path + "heldout_every", "must be at least 2");
    if (!d.contains("sources") || !d["sources"].is_array() || d["sources"].empty())
      throw FormatError(source, path + "sources", "must list at least one source");
    for (std::size_t k = 0; k < d["sources"].size(); ++k) {
      const json& sj = d["sources"][k];
      const std::string sp = path + "sources[" + std::to_string(k) + "].";
      CorpusSource cs;
      cs.files = r.get<std::vector<std::string>>(sj, "files", sp, {});
      cs.command = r.get<std::vector<std::string>>(sj, "command", sp, {});
      if (cs.files.empty() == cs.command.empty()) throw FormatError(source, sp + "files", "give either files or command");
      cs.format = r.get<std::string>(sj, "format", sp, "text");
      cs.from_marker = r.get<std::string>(sj, "from_marker", sp, "");
      cs.strip_indent = r.get<bool>(sj, "strip_indent", sp, false);
      ds.sources.push_back(std::move(cs));
    }
    f.domains.push_back(std::move(ds));
  }
  return f;
}

ForgeRecipe load_recipe(const std::filesystem::path& file) {
  return parse_recipe(read_text_file(file, "start from sample_configs/forge-sample.json"), file.string());
}

}  // namespace mosaic
