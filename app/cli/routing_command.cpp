// routing: how a variant's router spreads real prompts over its experts, measured and fitted as a
// routing model (mosaic.routing/1) for the simulated clock's `"routing"` (sim/routing_model.h).
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <optional>

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

namespace {

// The prompt lengths a model fitted at `n` tokens is shown at: a quarter, half, once and twice.
std::array<std::int64_t, 4> checked_lengths(std::int64_t n) {
  return {std::max<std::int64_t>(1, n / 4), std::max<std::int64_t>(1, n / 2), n, 2 * n};
}

// A routing model fitted to a published overlap alone: no weights, no text.
RoutingModel published_model(double overlap, std::int64_t experts, std::int64_t top_k, std::int64_t tokens, const std::string& source) {
  if (top_k > experts)
    throw InvalidArgument("--top-k", std::to_string(top_k), "is more than --experts (" + std::to_string(experts) + ")",
                          "give the experts each token takes (num_experts_per_tok) and the routed experts per layer (num_local_experts)");
  RoutingModel r;
  r.source = source;
  r.experts = experts;
  r.top_k = top_k;
  r.prompt_tokens = tokens;
  r.windows = 0;
  r.overlap = overlap;
  r.concentration = fit_concentration_to_overlap(overlap, experts, top_k);
  r.distinct = expected_distinct(r.concentration, tokens, experts, top_k);
  r.uniform_distinct = expected_distinct(0, tokens, experts, top_k);
  return r;
}

void print_published(const RoutingModel& r) {
  std::printf("published overlap %.4f (uniform %.4f), %lld experts, top-%lld\n", r.overlap, expected_overlap(0, r.experts, r.top_k),
              static_cast<long long>(r.experts), static_cast<long long>(r.top_k));
  if (r.concentration > 0)
    std::printf("fitted concentration %.4g\n", r.concentration);
  else
    std::printf("no more overlap than uniform routing's: concentration 0 (uniform)\n");
  std::printf("\n%-14s %10s %10s\n", "prompt tokens", "model", "uniform");
  for (std::int64_t tokens : checked_lengths(r.prompt_tokens))
    std::printf("%-14lld %10.2f %10.2f\n", static_cast<long long>(tokens), expected_distinct(r.concentration, tokens, r.experts, r.top_k),
                expected_distinct(0, tokens, r.experts, r.top_k));
  std::printf("(distinct experts per MoE layer in a prompt. The model's tokens share an expert with every other token of their prompt as "
              "often as the published neighbours do; a real router's locality fades with distance, so it is expected to touch at least this many)\n");
}

}  // namespace

void add_routing_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("routing",
                                 "Measure how a variant routes real prompts (distinct experts per MoE layer in a prompt, experts shared by "
                                 "neighbouring tokens) and fit a routing model (mosaic.routing/1) for the simulated clock; or fit one to a "
                                 "published overlap (--overlap) for a model whose weights are not at hand");
  struct Opts {
    fs::path variant, out;
    std::vector<fs::path> texts;
    std::int64_t prompt_tokens = 20, windows = 256;
    std::optional<double> overlap;
    std::int64_t experts = 0, top_k = 0;
    std::string source;
  };
  auto o = std::make_shared<Opts>();
  auto* variant = cmd->add_option("--variant", o->variant, "a checkpoint folder (config.json, safetensors, tokenizer.json)");
  auto* text = cmd->add_option("--text", o->texts, "real text files (UTF-8), each cut into prompts of --prompt-tokens tokens");
  cmd->add_option("--out", o->out, "routing model JSON to write")->required();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "tokens per prompt: the simulated prompts' length")->default_val(20)->check(CLI::Range(1, 1 << 16));
  auto* windows = cmd->add_option("--windows", o->windows, "at most this many prompts, shared among the texts and spread over each")->default_val(256)->check(CLI::Range(1, 1 << 20));
  auto* overlap = cmd->add_option("--overlap", o->overlap,
                                  "instead of measuring: the published share, in [0, 1), of neighbouring tokens whose top-k share an expert (the "
                                  "Mixtral paper's Table 5, \"first or second choice\"; 0.542 for 54.2 %)")
                      ->check(CLI::Validator(
                          [](std::string& v) -> std::string {
                            double x = -1;
                            try {
                              x = std::stod(v);
                            } catch (const std::exception&) {
                            }
                            return x >= 0 && x < 1 ? std::string() : "'" + v + "' is not a share in [0, 1): give 0.542 for 54.2 %";
                          },
                          "SHARE"));
  // Bounded so that the Monte Carlo fit stays within seconds.
  auto* experts = cmd->add_option("--experts", o->experts, "with --overlap: routed experts per MoE layer (at most 1024)")->check(CLI::Range(1, 1024));
  auto* top_k = cmd->add_option("--top-k", o->top_k, "with --overlap: experts per token")->check(CLI::Range(1, 1024));
  auto* source = cmd->add_option("--source", o->source, "with --overlap: where the figure was published (written into the file)");
  for (auto* needs : {experts, top_k, source}) {
    needs->needs(overlap);
    overlap->needs(needs);
  }
  overlap->excludes(variant)->excludes(text)->excludes(windows);
  cmd->callback([o] {
    if (o->overlap) {
      if (o->prompt_tokens > 4096)
        throw InvalidArgument("--prompt-tokens", std::to_string(o->prompt_tokens), "is more than 4096, which --overlap's Monte Carlo fit prices",
                              "give the prompt length the simulated sweep uses (its \"prompt\")");
      check_output(o->out, "--out", {});
      const RoutingModel r = published_model(*o->overlap, o->experts, o->top_k, o->prompt_tokens, o->source);
      write_file_atomically(o->out, [&](std::ostream& f) { f << routing_model_json(r); });
      print_published(r);
      std::cout << "wrote " << o->out.string() << "\n";
      return;
    }
    if (o->variant.empty() || o->texts.empty())
      throw InvalidArgument("routing", "--variant and --text", "are required unless --overlap is given",
                            "measure a checkpoint on real text, or fit a published overlap with --overlap --experts --top-k --source");
    std::vector<fs::path> inputs = o->texts;
    inputs.push_back(o->variant);
    check_output(o->out, "--out", inputs);
    if (!fs::exists(o->variant / "config.json") && fs::is_directory(o->variant))
      throw InvalidArgument("--variant", o->variant.string(), "is not a checkpoint folder (it holds no config.json)",
                            "give one variant's folder: routing measures one checkpoint");
    const Checkpoint checkpoint(o->variant);
    if (o->prompt_tokens > checkpoint.spec().max_position_embeddings)
      throw InvalidArgument("--prompt-tokens", std::to_string(o->prompt_tokens),
                            "is more than the model's context of " + std::to_string(checkpoint.spec().max_position_embeddings) + " tokens",
                            "give prompts the model was made to read");
    const fs::path tok = o->variant / "tokenizer.json";
    if (!fs::exists(tok)) throw MissingError(tok.string(), "", "is absent: --text is encoded with the variant's tokenizer", "copy the tokenizer.json beside config.json");
    const Tokenizer tokenizer = Tokenizer::load(tok);
    std::vector<std::vector<std::int64_t>> ids;
    for (const fs::path& t : o->texts) ids.push_back(tokenizer.encode(read_text_file(t, "give a text file"), /*add_special=*/false));
    const auto model = Model::load(checkpoint);
    const ModelSpec& s = model->spec();
    // Every text's prompts, its share of --windows, pooled: counts weighted by prompts.
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
        if (all.distinct.empty())
          all = RoutingMeasurement{tokens, 0, m.layers, std::vector<double>(m.distinct.size(), 0.0), std::vector<double>(m.overlap.size(), 0.0)};
        for (std::size_t l = 0; l < m.distinct.size(); ++l) {
          all.distinct[l] += m.distinct[l] * static_cast<double>(m.windows);
          all.overlap[l] += m.overlap[l] * static_cast<double>(m.windows);
        }
        all.windows += m.windows;
      }
      for (double& d : all.distinct) d /= static_cast<double>(all.windows);
      for (double& d : all.overlap) d /= static_cast<double>(all.windows);
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
    r.overlap = m.mean_overlap();
    r.concentration = fit_concentration(r.distinct, m.tokens, s.num_experts, s.top_k);
    write_file_atomically(o->out, [&](std::ostream& f) { f << routing_model_json(r); });

    std::printf("%lld prompts of %lld tokens, %lld experts, top-%lld\n", static_cast<long long>(m.windows), static_cast<long long>(m.tokens),
                static_cast<long long>(s.num_experts), static_cast<long long>(s.top_k));
    std::printf("%-10s %18s %18s\n", "MoE layer", "distinct experts", "neighbours share");
    for (std::size_t i = 0; i < m.layers.size(); ++i)
      std::printf("%-10lld %18.2f %18.3f\n", static_cast<long long>(m.layers[i]), m.distinct[i], m.overlap[i]);
    std::printf("%-10s %18.2f %18.3f\n%-10s %18.2f %18.3f\n", "mean", r.distinct, r.overlap, "uniform", r.uniform_distinct,
                expected_overlap(0, s.num_experts, s.top_k));
    if (r.concentration > 0)
      std::printf("fitted concentration %.4g (its tokens share an expert with any other of their prompt %.3f of the time)\n", r.concentration,
                  expected_overlap(r.concentration, s.num_experts, s.top_k));
    else
      std::printf("no skew within a prompt beyond uniform routing's: concentration 0 (uniform)\n");
    // The model is fitted at one prompt length; how well it predicts others says whether its shape fits.
    std::printf("\n%-14s %10s %10s %10s\n", "prompt tokens", "measured", "model", "uniform");
    for (std::int64_t tokens : checked_lengths(o->prompt_tokens)) {
      const double measured = tokens == o->prompt_tokens ? r.distinct : measure(tokens).mean();
      std::printf("%-14lld %10.2f %10.2f %10.2f\n", static_cast<long long>(tokens), measured,
                  expected_distinct(r.concentration, tokens, s.num_experts, s.top_k), expected_distinct(0, tokens, s.num_experts, s.top_k));
    }
    std::cout << "wrote " << o->out.string() << "\n";
  });
}

}  // namespace mosaic::cli
