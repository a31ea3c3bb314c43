#include "cli/serving_args.h"

#include <charconv>
#include <iostream>

#include <nlohmann/json.hpp>

#include "analysis/layout.h"
#include "cli/choice.h"
#include "common/atomic_file.h"
#include "common/byte_size.h"
#include "common/edit_distance.h"
#include "common/error.h"
#include "model/variant_folders.h"
#include "runtime/capacity.h"
#include "runtime/miss_policy.h"
#include "serving/served_family.h"

namespace mosaic::cli {

Device checked_device(const std::string& name) {
  const auto d = parse_device(name);
  if (!d) refuse_choice("--device", name, "a device", {"cpu", "cuda"});
  if (const auto why = device_unavailable(*d)) throw DeviceError("--device " + name, "", *why, "use --device cpu on this machine");
  return *d;
}

CpuWeights checked_cpu_weights(const std::string& name) {
  const auto w = parse_cpu_weights(name);
  if (!w) refuse_choice("--cpu-weights", name, "a weight layout", {"stored", "fp32", "mapped"});
  return *w;
}

std::vector<std::filesystem::path> ServingArgs::inputs() const {
  std::vector<std::filesystem::path> in = variants;
  in.push_back(model);
  in.push_back(base);
  in.push_back(layout);
  in.push_back(resident);
  return in;
}

void add_reserve_options(CLI::App* cmd, ReserveSpec& reserve, bool miss_slots) {
  // The same bounds as a session file's reserve.
  cmd->add_option("--context", reserve.context_tokens, "reserve: KV cache tokens per request (at most the model's context, whatever is given)")->default_val(reserve.context_tokens)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  cmd->add_option("--requests", reserve.requests, "reserve: requests holding a KV cache at once")->default_val(reserve.requests)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--prefill-chunk", reserve.prefill_chunk, "reserve: tokens per forward step")->default_val(reserve.prefill_chunk)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  if (miss_slots)
    cmd->add_option("--miss-slots", reserve.miss_slots, "reserve: expert slots for on-demand loads (-1 = top_k)")->default_val(reserve.miss_slots)
        ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 20));
}

void ServingArgs::add_to(CLI::App* cmd, bool with_model, bool with_target) {
  if (with_model) {
    cmd->add_option("--model", model, "checkpoint folder (or an ESFT adapter folder, served over its base)");
    cmd->add_option("--base", base, "with --model: the base of an ESFT adapter whose expert_cfg.json names none (DeepSeek's)");
  }
  cmd->add_option("--variants", variants, "serve these variants with the multi-variant runtime (instead of --model)");
  cmd->add_option("--layout", layout, "with --variants: the layout file (mosaic-cli consolidate)");
  cmd->add_option("--capacity", capacity, "with --variants and no --layout: plan a round-robin layout with this many resident experts")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 24));
  if (with_target) cmd->add_option("--target", target, "with --variants: the variant or adapter to run");
  if (with_model)
    cmd->add_option("--resident", resident,
                    "with --model: JSON {\"<layer>\": [expert ids]}: only these experts are resident and the router chooses among them "
                    "(SwapMoE's masked gating, whatever --miss says); nothing else is loaded; layers not named keep every expert");
  cmd->add_option("--hit", hit, "consolidated (any resident copy serves) | strict (only the target's own)")->default_val("consolidated");
  cmd->add_option("--miss", miss, "transient (load, use, drop) | lru (keep in spare slots) | prefetch (lru, and the next layer's likely experts loaded ahead where that has paid) | prefetch-always (at every layer and step) | masked (never load; gate over resident experts)")
      ->default_val("transient");
  cmd->add_option("--budget", budget, "device budget, e.g. 2GiB (default: no limit, every byte still counted)");
  cmd->add_option("--host-budget", host_budget,
                  "host RAM for the checkpoints' bytes, e.g. 16GiB: the most used stay resident, the rest are read from disk as "
                  "needed (default: all of them, as read)");
  cmd->add_option("--miss-slots", miss_slots, "scratch slots for misses (-1 = top_k)")->default_val(-1)->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 20));
  cmd->add_flag("--no-reconfig", no_reconfig, "ablation: never swap non-expert weights; layout variant 0's stay resident");
  cmd->add_option("--resident-sets", resident_sets,
                  "non-expert sets resident at once, budget permitting: auto (every set the variants use; with --budget and no "
                  "--capacity, room for a second one when it costs at most 1/8 of the resident experts) or 1 to 1024 (1: the paper)")
      ->default_val("auto");
  cmd->add_option("--admission", admission,
                  "affinity (requests of resident sets first, then the set with the most queued work, its wait weighed against "
                  "--max-wait; with every set buffer busy, the sets take turns in the order they began to wait) | fcfs "
                  "(arrival order: the paper's setting)")
      ->default_val("affinity");
  cmd->add_option("--max-wait", max_wait, "affinity's fairness bound: past it, the oldest request goes first (seconds)")
      ->default_val(SchedulerOptions::kDefaultMaxWait)
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_flag("--park", park,
                "affinity: a running set makes room for another by parking its sequences with their KV blocks (they resume where "
                "they stopped), not by draining them: lower TTFT, higher TPOT");
  cmd->add_option("--residency", residency,
                  "--park: the shortest turn of a set switched in; its turn is its share of the work left times --max-wait where that is longer (seconds)")
      ->default_val(SchedulerOptions::kDefaultResidency)
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--kv-admission", kv_admission,
                  "greedy (a request joins when the KV blocks for its tokens so far are free; the newest running sequence is "
                  "preempted when they run out) | reserve (it joins only when the blocks hold it and every running sequence at their "
                  "longest, prompt + max tokens: no running sequence is preempted)")
      ->default_val("greedy")
      ->check(CLI::IsMember({"greedy", "reserve"}));
  cmd->add_option("--max-sequences", max_sequences, "sequences one engine step may run (1: one request at a time)")->default_val(256)
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16));
  cmd->add_flag("--swap-ahead,!--no-swap-ahead", swap_ahead,
               "look-ahead swaps: fill a waiting request's non-expert set into a free buffer while the batch decodes (default: on "
               "wherever two sets or more are resident)");
  cmd->add_option("--device", device, "cpu (the fp32 reference) | cuda (bf16 weights on the GPU)")->default_val("cpu");
  cmd->add_option("--cpu-weights", cpu_weights,
                  "stored (bf16 weights stay bf16 on the CPU, widened to fp32 as they are read: the same numbers, half the memory and "
                  "bytes per token) | fp32 (every weight widened when loaded) | mapped (bf16 and fp32 weights read where the checkpoints are "
                  "mapped: no copies, the files held once; loads and swaps move nothing; not with --host-budget)")
      ->default_val("stored");
  cmd->add_option("--stats", stats, "write hits, misses, loads, swaps, timings and engine steps to this JSON file");
}

std::optional<std::uint64_t> host_budget_bytes(const std::string& text) {
  if (text.empty() || text == "all") return std::nullopt;
  const auto bytes = parse_byte_size(text);
  if (!bytes) throw InvalidArgument("--host-budget", "'" + text + "'", byte_size_problem(text), "write e.g. 16GiB, or all");
  return bytes;
}

std::unique_ptr<ServingSession> open_serving(const ServingArgs& a, bool need_target, Build build) {
  if (a.model.empty() == a.variants.empty())
    throw InvalidArgument("arguments", "--model / --variants", a.model.empty() ? "neither was given" : "both were given",
                          "give --model DIR for one checkpoint, or --variants … --layout … to serve several");
  auto s = std::make_unique<ServingSession>();
  ServingChoices choices;
  const auto hit = parse_hit_policy(a.hit);
  if (!hit) refuse_choice("--hit", a.hit, "a hit policy", {"consolidated", "strict"});
  if (!make_miss_policy(a.miss)) refuse_choice("--miss", a.miss, "a miss policy", miss_policy_names());
  choices.hit = *hit;
  choices.miss = a.miss;
  choices.device = checked_device(a.device);
  choices.cpu_weights = checked_cpu_weights(a.cpu_weights);
  choices.reserve.miss_slots = a.miss_slots;
  choices.own_miss_slots = a.miss_slots != -1;
  if (a.resident_sets == "auto") {
    choices.resident_sets = RuntimeConfig::kAutoSets;
  } else {
    int k = 0;
    const auto [end, ec] = std::from_chars(a.resident_sets.data(), a.resident_sets.data() + a.resident_sets.size(), k);
    if (ec != std::errc() || end != a.resident_sets.data() + a.resident_sets.size() || k < 1 || k > 1024) throw InvalidArgument("--resident-sets", "'" + a.resident_sets + "'", "is not auto or a whole number from 1 to 1024", "write auto, or e.g. 2");
    choices.resident_sets = k;
  }
  if (a.swap_ahead.value_or(false) && choices.resident_sets == 1)
    throw InvalidArgument("--swap-ahead", "", "fills a free set buffer ahead, and with --resident-sets 1 there is none", "add --resident-sets 2, or auto");
  if (a.admission != "fcfs" && a.admission != "affinity")
    refuse_choice("--admission", a.admission, "an admission policy", {"affinity", "fcfs"});
  if (!a.budget.empty()) {
    choices.budget = parse_byte_size(a.budget);
    if (!choices.budget) throw InvalidArgument("--budget", "'" + a.budget + "'", byte_size_problem(a.budget), "write e.g. 2GiB");
  }
  if (!a.base.empty() && a.model.empty())
    throw InvalidArgument("--base", a.base.string(), "is the base of the adapter --model names", "with --variants, list the base before its adapters");
  check_base_option(a.base, {a.model});
  if (!a.resident.empty() && a.model.empty())
    throw InvalidArgument("--resident", a.resident.string(), "fixes the resident experts of one checkpoint", "give it with --model DIR, not --variants");
  if (!a.variants.empty() && a.layout.empty() && a.capacity < 0 && !choices.budget)
    throw InvalidArgument("--variants", "--layout / --capacity / --budget", "serving several variants needs a layout",
                          "give a layout from `mosaic-cli consolidate`, --capacity N to plan one, or --budget B to plan one that fits");
  // What is served, assembled as every front end assembles it (serving/served_family.h).
  open_served(*s, {.model = a.model, .variants = a.variants, .base = a.base, .resident = a.resident, .layout = a.layout,
                   .capacity = a.capacity >= 0 ? std::optional(a.capacity) : std::nullopt, .layer_caps = a.layer_slots,
                   .no_reconfig = a.no_reconfig, .host_budget = host_budget_bytes(a.host_budget), .choices = choices,
                   .warn = [](const std::string& w) { std::cerr << "warning: " << w << "\n"; }});
  s->target = a.model.empty() ? a.target : s->model;
  if (!a.variants.empty() && need_target && s->store->index(a.target) < 0) {
    std::vector<std::string> names;
    for (int t = 0; t < s->store->targets(); ++t) names.push_back(s->store->name(t));
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string_view near = nearest_name(a.target, std::vector<std::string_view>(names.begin(), names.end()));
    throw InvalidArgument("--target", "'" + a.target + "'",
                          a.target.empty() ? "is missing"
                                           : "is not one of the variants given" + (near.empty() ? std::string() : " (did you mean '" + std::string(near) + "'?)"),
                          "name one of: " + list);
  }
  if (build == Build::Config) return s;
  s->runtime = std::make_shared<Runtime>(*s->store, s->config);
  if (build == Build::Runtime) return s;
  s->engine = std::make_unique<Engine>(
      s->runtime, EngineOptions{.scheduler = {.max_sequences = a.max_sequences,
                                              .switching = a.admission == "fcfs" ? SwitchPolicy::Fcfs : SwitchPolicy::Affinity,
                                              .max_wait_seconds = a.max_wait,
                                              .park = a.park,
                                              .residency_seconds = a.residency,
                                              .swap_ahead = a.swap_ahead,
                                              .kv_admission = parse_kv_admission(a.kv_admission).value()}});  // CLI checked the name
  return s;
}

std::vector<RequestResult> serve_all(ServingSession& s, std::vector<ServeRequest> requests) {
  const auto handles = s.engine->submit_all(std::move(requests));
  std::vector<RequestResult> out;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    const RequestResult& r = handles[i]->wait();
    if (r.finish == Finish::Failed)
      throw InvalidArgument("request " + std::to_string(i), "target '" + handles[i]->target() + "'", r.error);
    out.push_back(r);
  }
  return out;
}

namespace {

nlohmann::ordered_json layer_json(const LayerCounts& x) {
  nlohmann::ordered_json j{{"hits", x.hits}, {"misses", x.misses}, {"loads", x.loads}, {"load_bytes", x.load_bytes}, {"load_seconds", x.load_seconds},
                           {"disk_loads", x.disk_loads}, {"disk_bytes", x.disk_bytes}, {"disk_seconds", x.disk_seconds}};
  if (x.prefetches > 0 || x.prefetch_used > 0) {  // only under the prefetch policy
    j["prefetches"] = x.prefetches;
    j["prefetch_used"] = x.prefetch_used;
    j["prefetch_bytes"] = x.prefetch_bytes;
    j["prefetch_seconds"] = x.prefetch_seconds;
  }
  return j;
}

}  // namespace

void write_serving_stats(const std::filesystem::path& path, const ServingSession& s, const std::vector<ServeRequest>& requests,
                         const std::vector<RequestResult>& results) {
  nlohmann::ordered_json j;
  const Runtime& rt = *s.runtime;
  j["hit"] = std::string(hit_policy_name(rt.config().hit));
  j["miss"] = std::string(rt.miss_policy().name());
  j["budget"] = {{"bytes", rt.config().budget_bytes ? nlohmann::ordered_json(*rt.config().budget_bytes) : nlohmann::ordered_json(nullptr)},
                 {"used", rt.budget().used()},
                 {"peak", rt.budget().peak()},
                 {"kv_blocks", rt.kv_blocks().capacity() ? nlohmann::ordered_json(*rt.kv_blocks().capacity()) : nlohmann::ordered_json(nullptr)},
                 {"kv_block_tokens", rt.kv_blocks().block_tokens()},
                 {"kv_blocks_peak", rt.kv_blocks().peak()}};
  if (const VirtualExperts* v = rt.virtual_experts()) {
    const VirtualStats& x = v->stats();
    j["virtual_experts"] = {{"updates", x.updates}, {"swapped", x.swapped}, {"bytes", x.bytes}, {"copy_seconds", x.copy_seconds},
                            {"steps_overlapped", x.steps_overlapped}};
  }
  const TierStats tier = s.store->tier().stats();
  j["host"] = {{"budget", s.store->tier().budget() ? nlohmann::ordered_json(*s.store->tier().budget()) : nlohmann::ordered_json(nullptr)},
               {"distinct_bytes", s.store->host_bytes()}, {"resident_bytes", tier.resident_bytes}, {"resident_peak", tier.resident_peak},
               {"disk_reads", tier.disk_reads}, {"disk_bytes", tier.disk_bytes}, {"disk_seconds", tier.disk_seconds},
               {"ahead_reads", tier.ahead_reads}, {"ahead_bytes", tier.ahead_bytes}, {"ahead_seconds", tier.ahead_seconds},
               {"disk_time_hidden", tier.hidden_share()}};
  const EngineStats e = s.engine->stats();
  j["engine"] = {{"steps", e.steps}, {"tokens", e.tokens}, {"largest_step_tokens", e.largest_step_tokens},
                 {"largest_step_sequences", e.largest_step_sequences}, {"preemptions", e.preemptions}, {"parks", e.parks}, {"swaps", e.swaps},
                 {"swaps_ahead", e.swaps_ahead}, {"swap_seconds_waited", e.swap_seconds}};
  RuntimeCounters all;
  all.layers.resize(static_cast<std::size_t>(s.store->spec().num_layers));
  j["requests"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const RequestStats& st = results[i].stats;
    const RuntimeCounters& c = st.counters;
    const LayerCounts t = c.total();
    nlohmann::ordered_json r = {{"target", requests[i].target}, {"finish", finish_name(results[i].finish)},
                                {"prompt_tokens", st.prompt_tokens}, {"generated_tokens", st.generated_tokens},
                                {"queue_wait_seconds", st.queue_wait()}, {"ttft_seconds", st.ttft()},
                                {"tpot_seconds", st.tpot()}, {"total_seconds", st.turnaround()},
                                {"preemptions", st.preemptions}, {"swaps", c.swaps}, {"swap_bytes", c.swap_bytes},
                                {"swap_seconds", c.swap_seconds}};
    const nlohmann::ordered_json totals = layer_json(t);
    for (const auto& [k, v] : totals.items()) r[k] = v;
    r["layers"] = nlohmann::ordered_json::array();
    for (std::size_t l = 0; l < c.layers.size(); ++l) {
      r["layers"].push_back(layer_json(c.layers[l]));
      all.layers[l] += c.layers[l];
    }
    all.swaps += c.swaps;
    all.swap_bytes += c.swap_bytes;
    all.swap_seconds += c.swap_seconds;
    j["requests"].push_back(r);
  }
  // The totals over every request, as one request's stats used to be written.
  j["swaps"] = all.swaps;
  j["swap_bytes"] = all.swap_bytes;
  j["swap_seconds"] = all.swap_seconds;
  const nlohmann::ordered_json totals = layer_json(all.total());
  for (const auto& [k, v] : totals.items()) j[k] = v;
  j["layers"] = nlohmann::ordered_json::array();
  for (std::size_t l = 0; l < all.layers.size(); ++l) {
    nlohmann::ordered_json x = layer_json(all.layers[l]);
    x["layer"] = l;
    j["layers"].push_back(x);
  }
  const std::string text = j.dump(1);
  write_file_atomically(path, [&](std::ostream& out) { out << text << "\n"; });
}

}  // namespace mosaic::cli
