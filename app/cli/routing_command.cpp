// routing: how a variant's router spreads real prompts over its experts, measured and fitted as a
// routing model (mosaic.routing/1) for the simulated clock's `"routing"` (sim/routing_model.h).
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "analysis/routing_measure.h"
#include "cli/commands.h"
#include "cli/output_paths.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/text_file.h"
#include "model/checkpoint.h"
#include "model/tokenizer.h"
#include "sim/routing_model.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

void add_routing_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("routing",
                                 "Measure how a variant routes real prompts (distinct experts per MoE layer in a prompt) and fit a routing model "
                                 "(mosaic.routing/1) for the simulated clock");
  struct Opts {
    fs::path variant, out;
    std::vector<fs::path> texts;
    std::int64_t prompt_tokens = 20, windows = 256;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--variant", o->variant, "a checkpoint folder (config.json, safetensors, tokenizer.json)")->required();
  cmd->add_option("--text", o->texts, "real text files (UTF-8), each cut into prompts of --prompt-tokens tokens")->required();
  cmd->add_option("--out", o->out, "routing model JSON to write")->required();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "tokens per prompt: the simulated prompts' length")->default_val(20)->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--windows", o->windows, "at most this many prompts, shared among the texts and spread over each")->default_val(256)->check(CLI::Range(1, 1 << 20));
  cmd->callback([o] {
    std::vector<fs::path> inputs = o->texts;
    inputs.push_back(o->variant);
    check_output(o->out, "--out", inputs);
    const Checkpoint checkpoint(o->variant);
    const fs::path tok = o->variant / "tokenizer.json";
    if (!fs::exists(tok)) throw MissingError(tok.string(), "", "is absent: --text is encoded with the variant's tokenizer", "copy the tokenizer.json beside config.json");
    const Tokenizer tokenizer = Tokenizer::load(tok);
    std::vector<std::vector<std::int64_t>> ids;
    for (const fs::path& t : o->texts) ids.push_back(tokenizer.encode(read_text_file(t, "give a text file"), /*add_special=*/false));
    const auto model = Model::load(checkpoint);
    const ModelSpec& s = model->spec();
    // Every text's prompts, its share of --windows, pooled: distinct counts weighted by prompts.
    const std::int64_t share = std::max<std::int64_t>(1, o->windows / static_cast<std::int64_t>(ids.size()));
    auto measure = [&](std::int64_t tokens) {
      RoutingMeasurement all;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        RoutingMeasurement m;
        try {
          m = measure_routing(*model, ids[i], tokens, share);
        } catch (const InvalidArgument&) {
          throw InvalidArgument(o->texts[i].string(), "text", "holds " + std::to_string(ids[i].size()) + " tokens, fewer than a prompt of " + std::to_string(tokens),
                                "give a longer text or fewer --prompt-tokens");
        }
        if (all.distinct.empty()) all = RoutingMeasurement{tokens, 0, m.layers, std::vector<double>(m.distinct.size(), 0.0)};
        for (std::size_t l = 0; l < m.distinct.size(); ++l) all.distinct[l] += m.distinct[l] * static_cast<double>(m.windows);
        all.windows += m.windows;
      }
      for (double& d : all.distinct) d /= static_cast<double>(all.windows);
      return all;
    };
    const RoutingMeasurement m = measure(o->prompt_tokens);

    RoutingModel r;
    r.source = o->variant.filename().string() + " on";
    for (const fs::path& t : o->texts) r.source += " " + t.filename().string();
    r.source += ": " + std::to_string(m.windows) + " prompts of " + std::to_string(m.tokens) + " tokens";
    r.experts = s.num_experts;
    r.top_k = s.top_k;
    r.prompt_tokens = m.tokens;
    r.windows = m.windows;
    r.distinct = m.mean();
    r.layer_distinct = m.distinct;
    r.uniform_distinct = expected_distinct(0, m.tokens, s.num_experts, s.top_k);
    r.concentration = fit_concentration(r.distinct, m.tokens, s.num_experts, s.top_k);
    write_file_atomically(o->out, [&](std::ostream& f) { f << routing_model_json(r); });

    std::printf("%lld prompts of %lld tokens, %lld experts, top-%lld\n", static_cast<long long>(m.windows), static_cast<long long>(m.tokens),
                static_cast<long long>(s.num_experts), static_cast<long long>(s.top_k));
    std::printf("%-10s %18s\n", "MoE layer", "distinct experts");
    for (std::size_t i = 0; i < m.layers.size(); ++i) std::printf("%-10lld %18.2f\n", static_cast<long long>(m.layers[i]), m.distinct[i]);
    std::printf("%-10s %18.2f\n%-10s %18.2f\n", "mean", r.distinct, "uniform", r.uniform_distinct);
    if (r.concentration > 0)
      std::printf("fitted concentration %.4g\n", r.concentration);
    else
      std::printf("no skew within a prompt beyond uniform routing's: concentration 0 (uniform)\n");
    // The model is fitted at one prompt length; how well it predicts others says whether its shape fits.
    std::printf("\n%-14s %10s %10s %10s\n", "prompt tokens", "measured", "model", "uniform");
    for (std::int64_t tokens : {std::max<std::int64_t>(1, o->prompt_tokens / 4), std::max<std::int64_t>(1, o->prompt_tokens / 2), o->prompt_tokens,
                                2 * o->prompt_tokens}) {
      const double measured = tokens == o->prompt_tokens ? r.distinct : measure(tokens).mean();
      std::printf("%-14lld %10.2f %10.2f %10.2f\n", static_cast<long long>(tokens), measured,
                  expected_distinct(r.concentration, tokens, s.num_experts, s.top_k), expected_distinct(0, tokens, s.num_experts, s.top_k));
    }
    std::cout << "wrote " << o->out.string() << "\n";
  });
}

}  // namespace mosaic::cli
