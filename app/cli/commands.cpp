// inspect, generate and logits.
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/family_args.h"
#include "cli/serving_args.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "model/family.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "runtime/forward.h"
#include "runtime/generation.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

std::vector<std::int64_t> parse_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw InvalidArgument("--ids", "'" + item + "'", "is not an integer token id", "write ids as 1,2,3");
    ids.push_back(v);
  }
  if (ids.empty()) throw InvalidArgument("--ids", "", "is empty", "write ids as 1,2,3");
  return ids;
}

std::string join(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

void print_checkpoint(const Checkpoint& ck) {
  const ModelSpec& s = ck.spec();
  std::map<std::string, int> dtypes;
  for (const Weight& w : ck.weights()) ++dtypes[std::string(dtype_name(w.dtype))];
  std::cout << "  architecture    " << s.model_type() << ": " << s.num_layers << " layers ("
            << s.num_sparse_layers() << " MoE), hidden " << s.hidden_size << ", " << s.num_heads << " heads / "
            << s.num_kv_heads << " kv heads of " << s.head_dim << ", vocab " << s.vocab_size << "\n"
            << "  experts         " << s.num_experts << " per MoE layer, top-" << s.top_k
            << (s.norm_topk_prob ? " renormalized" : "") << ", width " << s.expert_intermediate;
  if (s.shared_expert_intermediate) std::cout << ", shared expert width " << s.shared_expert_intermediate;
  std::cout << "\n  parameters      " << parameter_count(s) << " total, " << active_parameter_count(s)
            << " active per token\n  dtypes          ";
  for (const auto& [name, count] : dtypes) std::cout << name << " (" << count << " tensors) ";
  std::cout << "\n  bytes           " << format_bytes(ck.total_bytes()) << " total, " << format_bytes(ck.non_expert_bytes())
            << " non-expert\n  expert bytes    per layer:";
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    std::uint64_t b = 0;
    for (std::int64_t e = 0; e < s.num_experts; ++e) b += s.is_sparse(l) ? ck.expert_bytes(l, e) : 0;
    std::cout << " " << format_bytes(b);
  }
  std::cout << "\n";
  if (s.num_experts > 0 && s.num_sparse_layers() > 0) {
    std::int64_t l = 0;
    while (!s.is_sparse(l)) ++l;
    std::cout << "  one expert      " << format_bytes(ck.expert_bytes(l, 0)) << "\n";
  }
  const auto unused = ck.unused_tensors();
  if (!unused.empty()) std::cout << "  unused tensors  " << unused.size() << " (first: " << unused.front() << ")\n";
}

// Exactly one of --model (one checkpoint) and --variants (the multi-variant runtime).
void require_one_source(const fs::path& model, const ServingArgs& serve) {
  if (model.empty() == serve.active()) return;
  throw InvalidArgument("arguments", "--model / --variants",
                        model.empty() ? "neither was given" : "both were given",
                        "give --model DIR for one checkpoint, or --variants … --layout … --target … to serve several");
}

void append(std::vector<std::int64_t>& to, const std::vector<std::int64_t>& more) { to.insert(to.end(), more.begin(), more.end()); }

std::unique_ptr<Model> load_model(const fs::path& dir, int threads) {
  configure_threads(threads);
  const Checkpoint ck(dir);
  return Model::load(ck);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Describe a checkpoint, or a family of variants, and check they match");
  auto dirs = std::make_shared<std::vector<fs::path>>();
  cmd->add_option("DIR", *dirs, "checkpoint folders, or a folder of variant folders")->required();
  cmd->callback([dirs] {
    Family family;  // added one by one, so each variant is printed before a later one is refused
    for (const auto& [name, dir] : variants_in(*dirs)) {
      const Variant& v = family.add(name, dir);
      std::cout << "variant " << v.name << "  (" << dir.string() << ")\n";
      print_checkpoint(*v.checkpoint);
    }
    if (family.size() > 1)
      std::cout << "family: " << family.size() << " variants of one " << family.spec().model_type() << " model, all match\n";
  });
}

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Continue a prompt of text (--prompt) or token ids (--ids) (CPU reference engine)");
  struct Opts { fs::path model; std::string ids, prompt; GenerationRequest req; std::string stop; int threads = 0; bool eos = false; ServingArgs serve; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "checkpoint folder");
  o->serve.add_to(cmd);
  auto* ids = cmd->add_option("--ids", o->ids, "prompt token ids, e.g. 1,2,3");
  cmd->add_option("--prompt", o->prompt, "prompt text, encoded with the variant's tokenizer.json; prints text")->excludes(ids);
  cmd->add_option("--max-new", o->req.max_new_tokens, "tokens to generate")->default_val(16);
  cmd->add_option("--temperature", o->req.sampling.temperature, "0 = greedy")->default_val(0.0);
  cmd->add_option("--top-p", o->req.sampling.top_p, "nucleus probability mass")->default_val(1.0);
  cmd->add_option("--top-k", o->req.sampling.top_k, "0 = no limit")->default_val(0);
  cmd->add_option("--seed", o->req.sampling.seed, "sampling seed")->default_val(0);
  cmd->add_option("--stop", o->stop, "stop ids, e.g. 2,7");
  cmd->add_flag("--stop-at-eos", o->eos, "also stop at the config's eos_token_id");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd->callback([o] {
    require_one_source(o->model, o->serve);
    if (o->ids.empty() && o->prompt.empty()) throw InvalidArgument("generate", "--ids / --prompt", "give a prompt", "write --prompt \"text\" or --ids 1,2,3");
    if (!o->stop.empty()) o->req.stop_ids = parse_ids(o->stop);
    // With --prompt the variant's own tokenizer encodes it and the output is text.
    std::optional<Tokenizer> tokenizer;
    auto prepare = [&](const fs::path& dir) {
      if (o->prompt.empty()) {
        o->req.prompt = parse_ids(o->ids);
        return;
      }
      tokenizer = Tokenizer::load(dir / "tokenizer.json");
      o->req.prompt = tokenizer->encode(o->prompt);
      if (o->req.prompt.empty()) throw InvalidArgument("--prompt", "", "encodes to no tokens");
    };
    auto print = [&](const std::vector<std::int64_t>& out) {
      if (tokenizer) std::cout << o->prompt << tokenizer->decode(out) << std::endl;
      else std::cout << join(out) << std::endl;
    };
    if (o->serve.active()) {
      configure_threads(o->threads);
      const auto session = open_serving(o->serve);
      prepare(session->family.find(o->serve.target)->checkpoint->dir());
      if (o->eos) append(o->req.stop_ids, session->store->spec().eos_token_ids);
      Engine engine(*session->runtime);
      const auto request = engine.submit({session->store->name(session->target), o->req});
      const RequestResult& r = request->wait();
      if (r.finish == Finish::Failed) throw InvalidArgument("generate", "request", r.error);
      print(r.tokens);
      const LayerCounts t = r.stats.counters.total();
      std::cerr << r.tokens.size() << " tokens, finish: " << finish_name(r.finish) << ", TTFT " << r.stats.ttft_seconds * 1e3
                << " ms, TPOT " << r.stats.tpot_seconds * 1e3 << " ms, " << t.hits << " hits, " << t.misses << " misses, "
                << t.loads << " loads, " << r.stats.counters.swaps << " swaps\n";
      if (!o->serve.stats.empty()) write_serving_stats(o->serve.stats, *session, r.stats.counters, &r.stats);
      return;
    }
    prepare(o->model);
    const auto model = load_model(o->model, o->threads);
    if (o->eos) append(o->req.stop_ids, model->spec().eos_token_ids);
    const GenerationResult r = generate(*model, o->req);
    print(r.tokens);  // before the stderr summary on a shared terminal
    std::cerr << r.tokens.size() << " tokens, finish: "
              << finish_name(r.finish)
              << ", prefill " << r.prefill_seconds * 1e3 << " ms, decode " << r.decode_seconds * 1e3 << " ms\n";
  });
}

void add_logits_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Write float32 logits [T, vocab] of a prompt to a safetensors file (key 'logits')");
  struct Opts { fs::path model, out; std::string ids; int threads = 0; ServingArgs serve; };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "checkpoint folder");
  o->serve.add_to(cmd);
  cmd->add_option("--ids", o->ids, "token ids, e.g. 1,2,3")->required();
  cmd->add_option("--out", o->out, "output .safetensors file")->required();
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)")->default_val(0);
  cmd->callback([o] {
    require_one_source(o->model, o->serve);
    const auto ids = parse_ids(o->ids);
    Logits logits;
    if (o->serve.active()) {
      configure_threads(o->threads);
      const auto session = open_serving(o->serve);
      KvCache cache(session->store->spec(), 1, static_cast<std::int64_t>(ids.size()));
      RuntimeCounters counters = session->runtime->new_counters();
      logits = session->runtime->forward(session->target, cache, ids, LogitsFor::AllPositions, counters);
      if (!o->serve.stats.empty()) write_serving_stats(o->serve.stats, *session, counters);
    } else {
      const auto model = load_model(o->model, o->threads);
      KvCache cache(model->spec(), 1, static_cast<std::int64_t>(ids.size()));
      logits = forward(*model, cache, ids, LogitsFor::AllPositions);
    }
    const TensorBytes t{"logits", DType::F32, {logits.rows, logits.vocab},
                        std::as_bytes(std::span<const float>(logits.values))};
    write_safetensors(o->out, std::span<const TensorBytes>(&t, 1), {{"format", "pt"}, {"model", o->serve.active() ? o->serve.target : o->model.string()}});
    std::cout << "wrote logits [" << logits.rows << ", " << logits.vocab << "] to " << o->out.string() << "\n";
  });
}

}  // namespace mosaic::cli
