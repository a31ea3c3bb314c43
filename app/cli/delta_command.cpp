// delta compress / expand: DeltaMoE's delta folders (docs/delta-format.md).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "analysis/delta_folder.h"
#include "analysis/delta_gptq.h"
#include "analysis/delta_within.h"
#include "common/machine.h"
#include "common/text_file.h"
#include "model/tokenizer.h"
#include "runtime/model.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "model/delta_config.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

std::string ratio(std::uint64_t from, std::uint64_t to) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f×", to ? static_cast<double>(from) / static_cast<double>(to) : 0.0);
  return s;
}

std::string relative(double error_sq, double norm_sq) {
  char s[32];
  std::snprintf(s, sizeof s, "%.4f", norm_sq > 0 ? std::sqrt(error_sq / norm_sq) : 0.0);
  return s;
}

void print_report(const DeltaReport& r) {
  std::cout << "layer  experts as stored  packed deltas  ratio   rel. error of W  rel. error of Δ\n";
  DeltaLayerReport total;
  for (const DeltaLayerReport& l : r.layers) {
    std::printf("%5lld  %17s  %13s  %6s  %15s  %15s\n", static_cast<long long>(l.layer), format_bytes(l.dense_bytes).c_str(),
                format_bytes(l.packed_bytes).c_str(), ratio(l.dense_bytes, l.packed_bytes).c_str(), relative(l.error_sq, l.weight_sq).c_str(),
                relative(l.error_sq, l.delta_sq).c_str());
    total.dense_bytes += l.dense_bytes;
    total.packed_bytes += l.packed_bytes;
    total.weight_sq += l.weight_sq;
    total.delta_sq += l.delta_sq;
    total.error_sq += l.error_sq;
  }
  std::printf("%5s  %17s  %13s  %6s  %15s  %15s\n", "all", format_bytes(total.dense_bytes).c_str(), format_bytes(total.packed_bytes).c_str(),
              ratio(total.dense_bytes, total.packed_bytes).c_str(), relative(total.error_sq, total.weight_sq).c_str(),
              relative(total.error_sq, total.delta_sq).c_str());
  int calibrated = 0, matrices = 0;
  double out_err = 0, out = 0, rounded = 0;
  for (const DeltaLayerReport& l : r.layers) {
    calibrated += l.calibrated;
    matrices += l.matrices;
    out_err += l.output_error_sq;
    out += l.output_sq;
    rounded += l.rounded_output_error_sq;
  }
  if (calibrated > 0)
    std::cout << "calibrated: " << calibrated << " of " << matrices << " expert matrices (the rest saw no token: rounded plainly); "
              << "relative output error on the calibration tokens " << relative(out_err, out) << " (rounding alone: " << relative(rounded, out) << ")\n";
  std::cout << "whole variant: " << format_bytes(r.variant_bytes) << " as stored, " << format_bytes(r.folder_bytes) << " as a delta folder ("
            << ratio(r.variant_bytes, r.folder_bytes) << "; the base is served once for every delta of it)\n";
}

}  // namespace

void add_delta_command(CLI::App& app) {
  auto* delta = app.add_subcommand("delta", "DeltaMoE delta folders: a fine-tune as its base plus 2:4-sparse, 2/4-bit expert deltas");
  delta->require_subcommand(1);

  auto* compress = delta->add_subcommand("compress", "Write a variant as packed expert deltas from its base (docs/delta-format.md)");
  struct CompressOpts {
    fs::path base, variant, out, calibration;
    int bits = 4;
    std::string sparsity = "2:4";
    std::int64_t group = 128, window = 256;
    bool within = false;
  };
  auto c = std::make_shared<CompressOpts>();
  auto* base_opt = compress->add_option("--base", c->base, "the checkpoint the variant was fine-tuned from");
  compress->add_flag("--within", c->within,
                     "DeltaMoE's own setting: each MoE layer's experts as the layer's medoid expert plus deltas of the others, "
                     "written as a family folder (OUT/medoid-base, OUT/<variant>-within)")
      ->excludes(base_opt);
  compress->add_option("--variant", c->variant, "the fine-tuned checkpoint")->required();
  compress->add_option("--bits", c->bits, "bits per stored delta value")->check(CLI::IsMember({2, 4}))->default_val(4);
  compress->add_option("--sparsity", c->sparsity, "2:4 keeps 2 of every 4 input columns; none keeps all")->check(CLI::IsMember({"2:4", "none"}))->default_val("2:4");
  compress->add_option("--group", c->group, "input columns per scale and zero")->default_val(128);
  compress->add_option("--calibration", c->calibration,
                       "text in the variant's domain: compress each expert against the inputs the variant gives it (GPTQ), not by rounding alone");
  compress->add_option("--calibration-window", c->window, "tokens per calibration sequence")->default_val(256)->check(CLI::Range(2, 1 << 16));
  compress->add_option("--out", c->out, "output delta folder (must not exist, or be empty)")->required();
  compress->callback([c] {
    if (c->base.empty() && !c->within)
      throw InvalidArgument("delta compress", "--base / --within", "neither was given",
                            "give --base DIR (the checkpoint the variant was fine-tuned from), or --within for deltas inside the variant");
    std::vector<fs::path> inputs{c->variant};
    if (!c->within) inputs.push_back(c->base);
    if (!c->calibration.empty()) inputs.push_back(c->calibration);
    check_output(c->out, "--out", inputs, OutputKind::Folder);
    const Checkpoint variant(c->variant);
    const DeltaFormat format{.bits = c->bits, .sparse24 = c->sparsity == "2:4", .group = c->group};
    std::optional<ExpertHessians> hessians;
    if (!c->calibration.empty()) {
      const std::string text = read_text_file(c->calibration, "give a text file in the variant's domain");
      const fs::path tok = variant.dir() / "tokenizer.json";
      if (!fs::exists(tok))
        throw MissingError(tok.string(), "", "is absent: --calibration encodes its text with the variant's tokenizer", "copy the tokenizer.json beside config.json");
      const std::vector<std::int64_t> ids = Tokenizer::load(tok).encode(text, /*add_special=*/false);
      hessians = ExpertHessians::collect(*Model::load(variant), ids, c->window, physical_memory_bytes() / 2);
      std::cout << "calibration: " << hessians->calibration_tokens() << " tokens of " << c->calibration.string() << "\n";
    }
    if (c->within) {
      const WithinReport w = write_delta_within(variant, format, c->out, hessians ? &*hessians : nullptr);
      std::cout << "layer medoids (the base expert of each MoE layer):";
      for (std::size_t l = 0; l < w.medoids.size(); ++l)
        if (w.medoids[l] >= 0) std::cout << " " << l << ":" << w.medoids[l];
      std::cout << "\n";
      print_report(w.delta);
      std::cout << "wrote " << w.base_dir.string() << " and " << w.delta_dir.string() << " (" << format_name(format)
                << "; serve both, e.g. --variants " << c->out.string() << ")\n";
      return;
    }
    print_report(write_delta(Checkpoint(c->base), variant, format, c->out, hessians ? &*hessians : nullptr));
    std::cout << "wrote " << c->out.string() << " (" << format_name(format) << ")\n";
  });

  auto* expand = delta->add_subcommand("expand", "Write the dense checkpoint a delta folder means: base + dequantized delta, experts in fp32");
  struct ExpandOpts { fs::path delta, out; };
  auto e = std::make_shared<ExpandOpts>();
  expand->add_option("--delta", e->delta, "a folder `delta compress` wrote")->required();
  expand->add_option("--out", e->out, "output checkpoint folder (must not exist, or be empty)")->required();
  expand->callback([e] {
    if (!fs::exists(e->delta)) throw MissingError("--delta", e->delta.string(), "does not exist", "give a folder `delta compress` wrote");
    std::vector<fs::path> inputs{e->delta};
    if (fs::exists(e->delta / kDeltaCfgFile)) {
      const DeltaConfig config = read_delta_config(e->delta / kDeltaCfgFile);
      inputs.push_back(config.base_model.is_absolute() ? config.base_model : e->delta / config.base_model);
    }
    check_output(e->out, "--out", inputs, OutputKind::Folder);
    write_expanded(e->delta, e->out);
    std::cout << "wrote " << e->out.string() << "\n";
  });
}

}  // namespace mosaic::cli
