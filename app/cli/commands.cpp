// inspect, generate and logits.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <iostream>
#include <map>
#include <optional>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/choice.h"
#include "cli/output_paths.h"
#include "model/variant_folders.h"
#include "cli/serving_args.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "common/jsonl.h"
#include "model/family.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "model/text_stream.h"
#include "model/tokenizer.h"
#include "runtime/forward.h"
#include "runtime/generation.h"
#include "runtime/request_checks.h"
#include "runtime/sampler.h"
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

// Everything inspect says about a checkpoint, as data: the text report and --json both read it.
nlohmann::ordered_json describe_checkpoint(const Checkpoint& ck) {
  const ModelSpec& s = ck.spec();
  nlohmann::ordered_json dtypes = nlohmann::ordered_json::object();
  for (const Weight& w : ck.weights()) dtypes[std::string(dtype_name(w.dtype))] = dtypes.value(std::string(dtype_name(w.dtype)), 0) + 1;
  nlohmann::ordered_json per_layer = nlohmann::ordered_json::array();
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    std::uint64_t b = 0;
    for (std::int64_t e = 0; e < s.num_experts; ++e) b += s.is_sparse(l) ? ck.expert_bytes(l, e) : 0;
    per_layer.push_back(b);
  }
  nlohmann::ordered_json j{
      {"model_type", std::string(s.model_type())}, {"layers", s.num_layers}, {"moe_layers", s.num_sparse_layers()},
      {"hidden", s.hidden_size}, {"heads", s.num_heads}, {"kv_heads", s.num_kv_heads}, {"head_dim", s.head_dim},
      {"vocab", s.vocab_size}, {"experts", s.num_experts}, {"top_k", s.top_k}, {"renormalized", s.norm_topk_prob},
      {"expert_width", s.expert_intermediate}, {"shared_expert_width", s.shared_expert_intermediate},
      {"parameters", parameter_count(s)}, {"active_parameters", active_parameter_count(s)}, {"dtypes", dtypes},
      {"bytes", ck.total_bytes()}, {"non_expert_bytes", ck.non_expert_bytes()}, {"expert_bytes_per_layer", per_layer}};
  // What one token costs the KV cache in bf16: every layer's keys and values, or latent attention's
  // compressed latent and rotary key.
  j["attention"] = s.mla ? "latent (MLA)" : s.num_kv_heads < s.num_heads ? "grouped-query" : "multi-head";
  j["kv_cache_bytes_per_token"] = s.num_layers * s.kv_cache_width() * 2;
  j["context"] = s.max_position_embeddings;
  if (s.rope_scaling.kind != RopeKind::Default)
    j["rope_scaling"] = {{"type", s.rope_scaling.kind == RopeKind::Yarn ? "yarn" : "llama3"}, {"factor", s.rope_scaling.factor},
                         {"original_max_position_embeddings", s.rope_scaling.original_max_positions}};
  if (s.router_scoring != RouterScoring::Softmax || s.expert_choice != ExpertChoice::TopK || s.routed_scaling_factor != 1.0)
    j["routing"] = {{"scores", s.router_scoring == RouterScoring::Sigmoid ? "sigmoid" : "softmax"},
                    {"choice", s.expert_choice == ExpertChoice::TopK ? "top-k" : s.expert_choice == ExpertChoice::GroupMax ? "group_limited_greedy" : "noaux_tc"},
                    {"groups", s.n_group}, {"topk_group", s.topk_group}, {"scaling", s.routed_scaling_factor}};
  std::int64_t first = 0;
  while (first < s.num_layers && !s.is_sparse(first)) ++first;
  if (s.num_experts > 0 && first < s.num_layers) j["one_expert_bytes"] = ck.expert_bytes(first, 0);
  if (ck.is_adapter()) {
    std::uint64_t own = 0;
    for (const auto& [l, e] : ck.adapter_experts()) own += ck.expert_bytes(l, e);
    j["esft"] = {{"base", ck.base_dir().string()}, {"experts_tuned", ck.adapter_experts().size()}, {"own_bytes", own}};
  }
  if (ck.is_delta()) {
    std::uint64_t packed = 0;
    for (const Weight& w : ck.weights())
      if (w.expected.is_expert()) packed += packed_bytes(ck.delta_format(), w.expected.shape[0], w.expected.shape[1]);
    const DeltaFormat& f = ck.delta_format();
    j["delta"] = {{"base", ck.base_dir().string()}, {"bits", f.bits}, {"sparsity", f.sparse24 ? "2:4" : "none"}, {"group", f.group},
                  {"packed_expert_bytes", packed}};
  }
  const auto unused = ck.unused_tensors();
  j["unused_tensors"] = unused;
  return j;
}

// What every variant of a family shares: the architecture, its experts, attention and size.
void print_architecture(const nlohmann::ordered_json& j) {
  std::cout << "  architecture    " << j["model_type"].get<std::string>() << ": " << j["layers"] << " layers (" << j["moe_layers"]
            << " MoE), hidden " << j["hidden"] << ", " << j["heads"] << " heads / " << j["kv_heads"] << " kv heads of "
            << j["head_dim"] << ", vocab " << j["vocab"] << "\n"
            << "  experts         " << j["experts"] << " per MoE layer, top-" << j["top_k"]
            << (j["renormalized"].get<bool>() ? " renormalized" : "") << ", width " << j["expert_width"];
  if (j["shared_expert_width"].get<std::int64_t>()) std::cout << ", shared expert width " << j["shared_expert_width"];
  if (j.contains("routing"))
    std::cout << "; " << j["routing"]["scores"].get<std::string>() << " scores, " << j["routing"]["choice"].get<std::string>() << " ("
              << j["routing"]["groups"] << " groups, " << j["routing"]["topk_group"] << " kept), weights ×" << j["routing"]["scaling"];
  std::cout << "\n  attention       " << j["attention"].get<std::string>() << ", " << format_bytes(j["kv_cache_bytes_per_token"].get<std::uint64_t>())
            << " of KV cache a token (bf16), context " << j["context"];
  if (j.contains("rope_scaling"))
    std::cout << " (" << j["rope_scaling"]["type"].get<std::string>() << " ×" << j["rope_scaling"]["factor"] << " over "
              << j["rope_scaling"]["original_max_position_embeddings"] << ")";
  std::cout << "\n  parameters      " << j["parameters"] << " total, " << j["active_parameters"] << " active per token\n";
}

// What is a variant's own: how it is stored, and what it is over (an adapter's or delta's base).
// `compact`: one line for the dtypes and bytes (a family's variants, under one architecture block).
void print_storage(const nlohmann::ordered_json& j, bool compact) {
  std::string dtypes;
  for (const auto& [name, count] : j["dtypes"].items()) dtypes += (dtypes.empty() ? "" : ", ") + name + " (" + std::to_string(count.get<int>()) + " tensors)";
  if (compact) {
    std::cout << "  stored          " << dtypes << "; " << format_bytes(j["bytes"]) << ", " << format_bytes(j["non_expert_bytes"]) << " non-expert\n";
  } else {
    std::cout << "  dtypes          " << dtypes << "\n  bytes           " << format_bytes(j["bytes"]) << " total, " << format_bytes(j["non_expert_bytes"])
              << " non-expert\n  expert bytes    per layer:";
    for (const auto& b : j["expert_bytes_per_layer"]) std::cout << " " << format_bytes(b);
    std::cout << "\n";
    if (j.contains("one_expert_bytes")) std::cout << "  one expert      " << format_bytes(j["one_expert_bytes"]) << "\n";
  }
  if (j.contains("esft")) {
    const auto& a = j["esft"];
    std::cout << "  ESFT adapter    of " << a["base"].get<std::string>() << ": " << a["experts_tuned"] << " experts tuned, "
              << format_bytes(a["own_bytes"]) << " of its own (the sizes above are the base's with them; served over the base by rerouting)\n";
  }
  if (j.contains("delta")) {
    const auto& d = j["delta"];
    std::cout << "  delta folder    over " << d["base"].get<std::string>() << ": " << d["bits"] << "-bit, " << d["sparsity"].get<std::string>()
              << ", group " << d["group"] << "; packed expert deltas " << format_bytes(d["packed_expert_bytes"])
              << " (the expert sizes above are the base's, to which they are added)\n";
  }
  if (!j["unused_tensors"].empty())
    std::cout << "  unused tensors  " << j["unused_tensors"].size() << " (first: " << j["unused_tensors"][0].get<std::string>() << ")\n";
}

void append(std::vector<std::int64_t>& to, const std::vector<std::int64_t>& more) { to.insert(to.end(), more.begin(), more.end()); }

// FILE.jsonl for `logits --requests`: one {"target": NAME, "ids": [..]} per line; `lines` gets where
// each was ("line 3"), for what the served model refuses in it.
std::vector<ServeRequest> read_logits_requests(const fs::path& file, std::vector<std::string>& lines) {
  const std::string hint = R"(write one {"target": "variant", "ids": [1, 2, 3]} per line)";
  std::vector<ServeRequest> out;
  read_jsonl(file, hint, [&](const std::string& where, const nlohmann::json& j) {
    if (!j.contains("target") || !j["target"].is_string()) throw FormatError(file.string(), where + ": field 'target'", "is missing or not a string", hint);
    if (!j.contains("ids") || !j["ids"].is_array() || j["ids"].empty())
      throw FormatError(file.string(), where + ": field 'ids'", "is missing or not a non-empty list", hint);
    ServeRequest r{j["target"].get<std::string>(), {.max_new_tokens = 0}, true};
    for (const auto& id : j["ids"]) {
      if (!id.is_number_integer()) throw FormatError(file.string(), where + ": field 'ids'", "holds " + id.dump() + ", not a token id", hint);
      r.generation.prompt.push_back(id.get<std::int64_t>());
    }
    out.push_back(std::move(r));
    lines.push_back(where);
  });
  if (out.empty()) throw FormatError(file.string(), "", "holds no requests", "write one JSON object per line");
  return out;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Describe a checkpoint, or a family of variants, and check they match");
  auto dirs = std::make_shared<std::vector<fs::path>>();
  cmd->add_option("DIR", *dirs, "checkpoint folders, or a folder of variant folders")->required();
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print one JSON document (variants, their facts, whether they match) instead of text");
  auto base = std::make_shared<fs::path>();
  cmd->add_option("--base", *base, "the base of an ESFT adapter whose expert_cfg.json names none (DeepSeek's), where none is listed before it");
  cmd->callback([dirs, json, base] {
    check_base_option(*base, *dirs);
    Family family;  // added one by one, so each variant is printed before a later one is refused
    nlohmann::ordered_json doc{{"variants", nlohmann::ordered_json::array()}};
    const auto found = discover_variants(*dirs);
    fs::path last_full = *base;  // as open_family opens a family
    for (const auto& [name, dir] : found) {
      const Variant& v = add_variant(family, name, dir, last_full);
      nlohmann::ordered_json facts = describe_checkpoint(*v.checkpoint);
      if (*json) {
        nlohmann::ordered_json entry{{"name", v.name}, {"dir", dir.string()}, {"adapter", v.checkpoint->is_adapter()}, {"delta", v.checkpoint->is_delta()}};
        entry.update(facts);
        doc["variants"].push_back(entry);
        continue;
      }
      // A family's architecture once (every variant is checked to match it), then each variant's own.
      if (found.size() > 1 && family.size() == 1) {
        std::cout << "architecture of the " << found.size() << " variants\n";
        print_architecture(facts);
        std::cout << "  expert bytes    per layer:";
        for (const auto& b : facts["expert_bytes_per_layer"]) std::cout << " " << format_bytes(b);
        std::cout << (facts.contains("one_expert_bytes") ? "; one expert " + format_bytes(facts["one_expert_bytes"]) : std::string()) << "\n";
      }
      std::cout << "variant " << v.name << (v.checkpoint->is_adapter() ? "  [ESFT adapter]" : v.checkpoint->is_delta() ? "  [delta folder]" : "")
                << "  (" << dir.string() << ")\n";
      if (found.size() == 1) print_architecture(facts);
      print_storage(facts, found.size() > 1);
    }
    if (*json) {
      doc["family_matches"] = true;  // a mismatch throws above (exit 2), with no document
      std::cout << doc.dump(2) << "\n";
    } else if (family.size() > 1) {
      std::cout << "family: " << family.size() << " variants of one " << family.spec().model_type() << " model, all match\n";
    }
  });
}

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Continue a prompt of text (--prompt) or token ids (--ids), served by the engine");
  struct Opts { std::string ids, prompt; GenerationRequest req; std::string stop; int threads = 0; bool eos = false; ServingArgs serve; };
  auto o = std::make_shared<Opts>();
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
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->callback([o] {
    if (o->ids.empty() && o->prompt.empty()) throw InvalidArgument("generate", "--ids / --prompt", "give a prompt", "write --prompt \"text\" or --ids 1,2,3");
    if (!o->stop.empty()) o->req.stop_ids = parse_ids(o->stop);
    Sampler{o->req.sampling};  // bad sampling settings are refused before anything loads or prints
    check_output(o->serve.stats, "--stats", o->serve.inputs());
    configure_threads(o->threads);
    const auto session = open_serving(o->serve);
    // With --prompt the target's own tokenizer encodes it and the output is text.
    std::optional<Tokenizer> tokenizer;
    if (o->prompt.empty()) {
      o->req.prompt = parse_ids(o->ids);
    } else {
      tokenizer = Tokenizer::load(session->family.find(session->target)->checkpoint->tokenizer_file());
      o->req.prompt = tokenizer->encode(o->prompt);
      if (o->req.prompt.empty()) throw InvalidArgument("--prompt", "", "encodes to no tokens");
    }
    if (o->eos) append(o->req.stop_ids, session->store->spec().eos_token_ids);
    // Refused before the prompt is echoed: an error would otherwise run on from the echoed text.
    check_request(session->store->spec(), o->req.prompt, o->req.max_new_tokens, "generate", "--max-new");
    // Tokens are printed as they come: as text (characters kept whole), or as ids.
    std::optional<TextStream> text;
    if (tokenizer) text.emplace(*tokenizer), std::cout << o->prompt << std::flush;
    std::size_t printed = 0;
    RequestCallbacks stream;
    stream.on_token = [&](const RequestHandle&, std::int64_t token, const RuntimeCounters&) {
      if (text) std::cout << text->push(token) << std::flush;
      else std::cout << (printed++ ? "," : "") << token << std::flush;
    };
    const std::vector<ServeRequest> requests{{session->target, o->req}};
    const auto handle = session->engine->submit(requests.front(), stream);
    const RequestResult& r = handle->wait();
    if (text) std::cout << text->finish();
    std::cout << std::endl;  // before the stderr summary on a shared terminal
    if (r.finish == Finish::Failed) throw InvalidArgument("generate", "target '" + session->target + "'", r.error);
    const std::vector<RequestResult> results{r};
    const LayerCounts t = r.stats.counters.total();
    std::cerr << r.tokens.size() << " tokens, finish: " << finish_name(r.finish) << ", TTFT " << r.stats.ttft() * 1e3
              << " ms, TPOT " << r.stats.tpot() * 1e3 << " ms, " << t.hits << " hits, " << t.misses << " misses, " << t.loads
              << " loads, ";
    if (t.prefetches > 0) std::cerr << t.prefetches << " prefetches (" << t.prefetch_used << " used), ";
    std::cerr << r.stats.counters.swaps << " swaps\n";
    if (!o->serve.stats.empty()) write_serving_stats(o->serve.stats, *session, requests, results);
  });
}

void add_logits_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Write float32 logits of prompts to a safetensors file: one prompt (--ids, key 'logits') "
                                           "or a JSONL file of requests (--requests, keys 'logits.<i>'), served as one batch");
  struct Opts { fs::path out, requests; std::string ids; int threads = 0; ServingArgs serve; };
  auto o = std::make_shared<Opts>();
  o->serve.add_to(cmd);
  auto* ids = cmd->add_option("--ids", o->ids, "token ids, e.g. 1,2,3 (with --model, or --variants … --target)");
  cmd->add_option("--requests", o->requests, "JSONL: one {\"target\": NAME, \"ids\": [..]} per line, all submitted at once")->excludes(ids);
  cmd->add_option("--out", o->out, "output .safetensors file")->required();
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->callback([o] {
    auto inputs = o->serve.inputs();
    inputs.push_back(o->requests);
    check_output(o->out, "--out", inputs);
    check_output(o->serve.stats, "--stats", inputs);
    check_output(o->serve.stats, "--stats", {o->out});
    if (o->ids.empty() == o->requests.empty())
      throw InvalidArgument("logits", "--ids / --requests", "give exactly one of them", "--ids 1,2,3 for one prompt, --requests FILE.jsonl for many");
    std::vector<ServeRequest> requests;
    std::vector<std::string> lines;
    if (!o->requests.empty()) requests = read_logits_requests(o->requests, lines);  // read before loading anything
    configure_threads(o->threads);
    const auto session = open_serving(o->serve, /*need_target=*/o->requests.empty());
    // What the served family refuses, said with the line it is on (the engine takes them as one batch).
    const auto runtime = session->engine->runtime();
    const Runtime& rt = *runtime;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string where = o->requests.string() + ", " + lines[i];
      if (rt.target_of(requests[i].target) < 0) {
        std::vector<std::string_view> names;
        for (int t = 0; t < rt.store().targets(); ++t) names.push_back(rt.store().name(t));
        refuse_choice(where + ": field 'target'", requests[i].target, "a variant being served", names);
      }
      check_request(rt.store().spec(), requests[i].generation.prompt, 0, where);
    }
    if (requests.empty()) requests.push_back({session->target, {.prompt = parse_ids(o->ids), .max_new_tokens = 0}, true});
    const auto results = serve_all(*session, requests);
    std::vector<TensorBytes> tensors;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Logits& l = results[i].logits;
      tensors.push_back({o->requests.empty() ? std::string("logits") : "logits." + std::to_string(i), DType::F32, {l.rows, l.vocab},
                         std::as_bytes(std::span<const float>(l.values))});
    }
    write_safetensors(o->out, tensors, {{"format", "pt"}, {"requests", std::to_string(results.size())}});
    if (!o->serve.stats.empty()) write_serving_stats(o->serve.stats, *session, requests, results);
    const EngineStats e = session->engine->stats();
    std::cout << "wrote logits of " << results.size() << " request(s) to " << o->out.string() << " (" << e.steps
              << " engine steps, at most " << e.largest_step_sequences << " sequences in one)\n";
  });
}

CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& what) {
  return cmd->add_option("--threads", threads, what)->default_val(threads)->check(CLI::Range(0, 4096));
}

}  // namespace mosaic::cli
