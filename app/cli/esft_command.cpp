// esft export: an ESFT adapter folder written as DeepSeek releases theirs (../shared/esft-format.md):
// expert_cfg.json in generate_expert_config.py's spelling (no base_model), the tuned tensors under the
// inner model's names ("layers.N.…") in model-00001-of-000001.safetensors with its index, the adapter's
// config and tokenizer files beside them. Such a folder opens in Mosaic over a base given beside it,
// and in deepseek-ai/ESFT's esft.py for a deepseek_v2 base.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "common/atomic_file.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/esft_adapter.h"
#include "model/safetensors.h"
#include "model/variant_folders.h"
#include "model/weight_names.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

constexpr const char* kShard = "model-00001-of-000001.safetensors";  // DeepSeek's naming: six digits for the total

// The tensor names DeepSeek's released adapters store: the inner model's, without "model.".
std::string released_name(const std::string& name) { return name.starts_with("model.layers.") ? name.substr(6) : name; }

void export_adapter(const fs::path& adapter, const fs::path& base, const fs::path& out) {
  const Checkpoint ck(adapter, base);
  if (!ck.is_adapter())
    throw InvalidArgument("--adapter", adapter.string(), "is not an ESFT adapter folder (it has no expert_cfg.json)",
                          "name a folder that expert_cfg.json describes");
  const EsftAdapterConfig cfg = read_expert_cfg(adapter / kExpertCfgFile, ck.spec());
  // What the adapter holds of its own: every weight read from the adapter's files, in module order
  // (layer, expert, gate/up/down), as the released index lists them.
  std::vector<TensorBytes> tensors;
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  std::uint64_t total = 0;
  for (const Weight& w : ck.weights()) {
    const fs::path from = w.file->path().parent_path();
    if (fs::weakly_canonical(from) != fs::weakly_canonical(adapter)) continue;  // the base's
    const auto bytes = w.data();
    tensors.push_back({released_name(w.expected.name), w.dtype, w.info->shape, bytes});
    map[released_name(w.expected.name)] = kShard;
    total += bytes.size();
  }
  StagedFolder staged(out);
  write_safetensors(staged.path() / kShard, tensors, {{"format", "pt"}});
  const std::string index = nlohmann::ordered_json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2) + "\n";
  write_file_atomically(staged.path() / "model.safetensors.index.json", [&](std::ostream& o) { o << index; });
  const std::string expert_cfg = deepseek_expert_cfg_text(cfg, ck.spec());
  write_file_atomically(staged.path() / kExpertCfgFile, [&](std::ostream& o) { o << expert_cfg; });
  // The config and tokenizer as the released adapters carry them: the adapter's, else its base's.
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    for (const fs::path& dir : {adapter, ck.base_dir()}) {
      std::error_code ec;
      if (!fs::is_regular_file(dir / name, ec)) continue;
      fs::copy_file(dir / name, staged.path() / name, ec);
      if (ec) throw IoError((staged.path() / name).string(), "", "cannot be written: " + ec.message(), "check the disk");
      break;
    }
  }
  staged.publish("--out", {adapter, ck.base_dir()});
  std::cout << "wrote " << out.string() << ": " << cfg.expert_count() << " tuned experts" << (cfg.shared_experts ? ", the shared experts" : "")
            << (cfg.non_expert_modules ? ", every non-expert tensor" : "") << " in " << tensors.size() << " tensors (" << format_bytes(total)
            << ") under DeepSeek's names; open it over its base (--variants BASE " << out.string() << ")\n";
  if (ck.spec().arch != Arch::DeepseekV2)
    std::cerr << "note: DeepSeek's esft.py loads adapters of deepseek_v2 models only; Mosaic reads this folder for "
              << ck.spec().model_type() << " too\n";
}

}  // namespace

void add_esft_command(CLI::App& app) {
  auto* esft = app.add_subcommand("esft", "ESFT adapters in DeepSeek's released format");
  esft->require_subcommand(1);
  auto* exp = esft->add_subcommand("export", "Write an ESFT adapter folder as DeepSeek releases theirs (expert_cfg.json without base_model, "
                                             "tensors named layers.N.…, one shard with its index)");
  struct Opts { fs::path adapter, base, out; };
  auto o = std::make_shared<Opts>();
  exp->add_option("--adapter", o->adapter, "the adapter folder (expert_cfg.json beside its tuned tensors)")->required();
  exp->add_option("--base", o->base, "its base, where its expert_cfg.json names none");
  exp->add_option("--out", o->out, "the folder to write (must not exist, or be empty)")->required();
  exp->callback([o] {
    check_base_option(o->base, {o->adapter});
    check_output(o->out, "--out", {o->adapter, o->base}, OutputKind::Folder);
    std::error_code ec;
    if (fs::exists(o->out, ec) && !fs::is_empty(o->out, ec))
      throw InvalidArgument("--out", o->out.string(), "already exists and is not an empty folder", "choose a new output folder or remove this one");
    export_adapter(o->adapter, o->base, o->out);
  });
}

}  // namespace mosaic::cli
