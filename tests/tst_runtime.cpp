// The multi-variant runtime under the engine: a continuously batched mix of full variants and ESFT
// adapters — different prompt lengths, some joining mid-way, some preempted — gives the logits and
// greedy tokens of each request run alone, under strict hits (each target's own model) and under
// consolidated hits (Multi-MoE's composed model); masked gating equals a reference that masks the
// router; the host store holds an adapter's base once; and the runtime prices the device exactly
// as the planner does.
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <malloc.h>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <utility>

#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "analysis/merge.h"
#include "common/error.h"
#include "model/mapped_file.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "model/variant_folders.h"
#include "runtime/cpu_attention.h"
#include "runtime/cpu_gemm.h"
#include "runtime/engine.h"
#include "runtime/forward.h"
#include "runtime/route_plan.h"
#include "runtime/threads.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

fs::path sample_family() { return fs::path(MOSAIC_RESOURCES) / "sample-family"; }

std::vector<float> reference_logits(const Model& m, const std::vector<std::int64_t>& ids,
                                    const std::vector<std::vector<bool>>* allowed = nullptr) {
  KvCache cache(m.spec(), 1, static_cast<std::int64_t>(ids.size()));
  return forward(m, cache, ids, LogitsFor::AllPositions, allowed).values;
}

// A budget that holds exactly: one non-expert set and `extra_sets` more, `pinned` experts, and the
// reserve (KV for `kv_tokens`, activations, scratch).
std::uint64_t budget_for(const Family& f, std::int64_t pinned, int extra_sets, std::int64_t kv_tokens) {
  const ReserveSpec reserve{.context_tokens = kv_tokens, .requests = 1};
  const CapacityPlan cap = plan_capacity(f, std::uint64_t(1) << 50, reserve);
  return cap.minimum_budget() + static_cast<std::uint64_t>(pinned) * cap.bytes_per_expert +
         static_cast<std::uint64_t>(extra_sets) * cap.non_expert_bytes;
}

void write_bytes(const fs::path& file, const std::vector<std::byte>& data) {
  std::ofstream f(file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  QVERIFY(f.flush());
}

// The resident bytes this process has of the mapping that holds `inside` (/proc/self/smaps).
std::uint64_t mapped_rss(const void* inside) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(inside);
  bool in = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) in = begin <= at && at < end;
    else if (in && line.rfind("Rss:", 0) == 0) return std::stoull(line.substr(4)) * 1024;
  }
  return ~0ull;
}

}  // namespace

class TestRuntime : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

  // The mixed batch on the sample family: full fine-tunes and adapters over the base, every
  // request a different prompt length; half ask for all logits, half generate greedily.
  void mixedBatch(HitPolicy hit, CpuWeights weights = CpuWeights::Stored) {
    Family family;
    open_family(family, {sample_family() / "bible", sample_family() / "fortunes", sample_family() / "jargon",
                         sample_family() / "esft-bible", sample_family() / "esft-c-headers"});
    QCOMPARE(family.size(), std::size_t(6));  // the adapters brought their base in
    const HostStore store(family);
    const auto analysis = analyze_family(family);
    const std::int64_t capacity = 24;  // of 32 positions, each one copy of six: many misses
    const Layout layout = make_layout(family, analysis->sha256, plan_consolidation(analysis->distances, capacity, Policy::RoundRobin));
    const std::int64_t kv_tokens = 96;  // 6 blocks of 16: fewer than the requests need at once
    RuntimeConfig config{.pinned = pinned_from_layout(layout, match_layout(layout, family, analysis->sha256, "layout")),
                         .hit = hit,
                         .resident_sets = 8,  // every non-expert set at once: variants mix in one step
                         .budget_bytes = budget_for(family, capacity, 4, kv_tokens),
                         .reserve = {.context_tokens = kv_tokens, .requests = 1},
                         .cpu_weights = weights};
    auto runtime = std::make_shared<Runtime>(store, config);
    QCOMPARE(runtime->resident_capacity(), 5);  // the budget held 4 sets beyond the first: 5 of 8 asked
    QCOMPARE(runtime->kv_blocks().capacity().value(), std::int64_t(6));
    QVERIFY(runtime->budget().used() <= *config.budget_bytes);

    const std::vector<std::string> targets{"bible", "esft-bible", "fortunes", "esft-c-headers", "jargon", "base", "bible", "esft-bible"};
    const std::int64_t vocab = store.spec().vocab_size;
    struct Case {
      std::string target;
      std::vector<std::int64_t> prompt;
      bool logits;
    };
    std::vector<Case> cases;
    for (std::size_t i = 0; i < targets.size(); ++i)
      cases.push_back({targets[i], prompt_of(5 + 4 * i, 100 + i, vocab), i % 2 == 0});
    auto request = [&](const Case& c) {
      return ServeRequest{c.target, {.prompt = c.prompt, .max_new_tokens = c.logits ? 0 : 12}, c.logits};
    };

    Engine engine(runtime);
    std::vector<std::shared_ptr<RequestHandle>> handles(cases.size());
    // The first three start together; the rest join while the first is decoding.
    std::vector<ServeRequest> first;
    for (std::size_t i = 0; i < 3; ++i) first.push_back(request(cases[i]));
    std::promise<std::vector<std::shared_ptr<RequestHandle>>> later;
    bool joined = false;  // the engine thread's own
    std::vector<RequestCallbacks> callbacks(3);
    callbacks[1].on_token = [&](const RequestHandle&, std::int64_t, const RuntimeCounters&) {
      if (std::exchange(joined, true)) return;
      std::vector<std::shared_ptr<RequestHandle>> more;
      for (std::size_t i = 3; i < cases.size(); ++i) more.push_back(engine.submit(request(cases[i])));
      later.set_value(more);
    };
    const auto started = engine.submit_all(std::move(first), callbacks);
    for (std::size_t i = 0; i < 3; ++i) handles[i] = started[i];
    const auto more = later.get_future().get();
    for (std::size_t i = 3; i < cases.size(); ++i) handles[i] = more[i - 3];

    std::int64_t preempted = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const RequestResult& r = handles[i]->wait();
      QVERIFY2(r.finish == Finish::Length, r.error.c_str());
      preempted += r.stats.preemptions;
      // Alone: the target's own model (strict), or the composed model of Algorithm 2 (consolidated).
      fs::path dir = family.find(cases[i].target)->checkpoint->dir();
      if (hit == HitPolicy::Consolidated) {
        dir = scratch("composed-" + std::to_string(i));
        if (!fs::exists(dir)) write_consolidated(family, layout, cases[i].target, dir);
      }
      const auto alone = Model::load(Checkpoint(dir));
      if (cases[i].logits) {
        QCOMPARE(r.logits.rows, static_cast<std::int64_t>(cases[i].prompt.size()));
        const double err = relative_error(r.logits.values, reference_logits(*alone, cases[i].prompt));
        QVERIFY2(err <= 1e-5, qPrintable(QStringLiteral("%1: %2").arg(QString::fromStdString(cases[i].target)).arg(err)));
      } else {
        QCOMPARE(r.tokens, generate(*alone, {.prompt = cases[i].prompt, .max_new_tokens = 12}).tokens);
      }
      // Every routed (token, expert) pair of every MoE layer of every token run is a hit or a miss.
      const auto t = r.stats.counters.total();
      QVERIFY(t.hits + t.misses >= static_cast<std::int64_t>(cases[i].prompt.size()) * 4 * store.spec().top_k);
      // Read in place, a miss's load moves no bytes (the sample family's experts are bf16).
      if (weights == CpuWeights::Mapped) QCOMPARE(t.load_bytes, std::uint64_t(0));
    }
    const EngineStats st = engine.stats();
    QVERIFY2(st.largest_step_sequences >= 3, qPrintable(QString::number(st.largest_step_sequences)));
    QVERIFY2(st.preemptions > 0 && preempted > 0, qPrintable(QString::number(st.preemptions)));
    QCOMPARE(runtime->kv_blocks().used(), std::int64_t(0));  // every block back
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void batchingChangesNothingStrict() { mixedBatch(HitPolicy::Strict); }
  void batchingChangesNothingConsolidated() { mixedBatch(HitPolicy::Consolidated); }
  void batchingChangesNothingReadInPlace() { mixedBatch(HitPolicy::Consolidated, CpuWeights::Mapped); }

  void everyMissPolicyOnEveryFixtureFamily() {
    // One request at a time and all at once give the same logits, for each hit and miss policy, on
    // each architecture; LRU keeps what it loaded, transient leaves the scratch slots empty.
    for (const auto& fam : families()) {
      Family family;
      for (const char* v : {"base", "ft1", "ft2", "esft1"}) family.add(v, fixture(fam, v));
      const HostStore store(family);
      const auto a = analyze_family(family);
      const Layout layout = make_layout(family, a->sha256, plan_consolidation(a->distances, 10, Policy::RoundRobin));
      const auto pinned = pinned_from_layout(layout, match_layout(layout, family, a->sha256, "layout"));
      std::vector<std::unique_ptr<Model>> own;
      for (const Variant& v : family.variants()) own.push_back(Model::load(*v.checkpoint));
      for (const auto& [miss, weights] : {std::pair{"transient", CpuWeights::Stored}, {"lru", CpuWeights::Stored},
                                          {"prefetch", CpuWeights::Stored}, {"transient", CpuWeights::Mapped}, {"prefetch", CpuWeights::Mapped}}) {
        auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = pinned, .hit = HitPolicy::Strict, .miss = miss,
                                                                 .resident_sets = 4, .cpu_weights = weights});
        Engine engine(rt);
        std::vector<ServeRequest> requests;
        for (int t = 0; t < 4; ++t)
          requests.push_back({store.name(t), {.prompt = prompt_of(7 + t, t, 320), .max_new_tokens = 0}, true});
        const auto handles = engine.submit_all(requests);
        for (int t = 0; t < 4; ++t) {
          const RequestResult& r = handles[static_cast<std::size_t>(t)]->wait();
          const double err = relative_error(r.logits.values, reference_logits(*own[static_cast<std::size_t>(t)], requests[static_cast<std::size_t>(t)].generation.prompt));
          QVERIFY2(err <= 1e-5, qPrintable(QStringLiteral("%1 %2 %3 %4: %5").arg(QString::fromStdString(fam), QString::fromUtf8(miss),
                                                                            QString::fromUtf8(cpu_weights_name(weights))).arg(t).arg(err)));
          QVERIFY(r.stats.counters.total().misses > 0);
        }
        for (std::int64_t l = 0; l < 3; ++l) {
          const SlotPool& pool = rt->slots(l);
          std::int64_t kept = 0;
          for (std::int64_t s = 0; s < pool.size(); ++s) kept += pool.role(s) == SlotPool::Role::Spare && pool.content(s) >= 0;
          QCOMPARE(kept > 0, std::string(miss) != "transient");
        }
        for (std::int64_t s = 0; s < rt->scratch().size(); ++s) QCOMPARE(rt->scratch().content(s), ExpertId(-1));
      }
    }
  }

  // DeepSeek-V2 and V3 through the engine: the batched step attends in the absorbed form over the
  // latent cache (one shared key head), the reference expands keys and values from the latent as
  // transformers does; group-limited routing, shared experts and scaled weights run through the route
  // plan. Mixed in one batch with every miss policy, each request's logits and greedy tokens are the
  // reference's for its own variant.
  void deepseekThroughTheEngineIsTheReference() {
    for (const std::string& config : {deepseek_v2_config(), deepseek_v3_config()}) {
      const ModelSpec spec = parse_model_spec(config, "config.json");
      const std::string arch(spec.model_type());
      Family family;
      for (std::uint64_t seed : {5, 6}) {
        const fs::path dir = scratch(arch + "-" + std::to_string(seed));
        write_synthetic_checkpoint(dir, spec, DType::F32, seed);
        family.add(seed == 5 ? "base" : "ft", dir);
      }
      const HostStore store(family);
      QCOMPARE(store.spec().num_sparse_layers(), std::int64_t(2));  // the first layer is dense: no expert positions
      const auto a = analyze_family(family);
      QVERIFY(std::isnan(a->distances.at(0, 0)) && std::isfinite(a->distances.at(1, 0)));  // no positions in the dense layer
      const Layout layout = make_layout(family, a->sha256, plan_consolidation(a->distances, 6, Policy::RoundRobin));
      const auto pinned = pinned_from_layout(layout, match_layout(layout, family, a->sha256, "layout"));
      std::vector<std::unique_ptr<Model>> own;
      for (const Variant& v : family.variants()) own.push_back(Model::load(*v.checkpoint));
      // Read in place too: the dense first layer's MLP and the shared experts with gate and up apart.
      for (const auto& [miss, weights] : {std::pair{"transient", CpuWeights::Stored}, {"lru", CpuWeights::Stored},
                                          {"prefetch", CpuWeights::Stored}, {"lru", CpuWeights::Mapped}}) {
        Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.pinned = pinned, .hit = HitPolicy::Strict, .miss = miss, .resident_sets = 2,
                                                                     .cpu_weights = weights}));
        std::vector<ServeRequest> requests;
        for (int i = 0; i < 4; ++i)
          requests.push_back({store.name(i % 2), {.prompt = prompt_of(6 + 3 * i, 40 + i, spec.vocab_size), .max_new_tokens = i < 2 ? 0 : 8}, i < 2});
        const auto handles = engine.submit_all(requests);
        for (int i = 0; i < 4; ++i) {
          const RequestResult& r = handles[static_cast<std::size_t>(i)]->wait();
          QVERIFY2(r.finish == Finish::Length, r.error.c_str());
          const Model& m = *own[static_cast<std::size_t>(i % 2)];
          const ServeRequest& q = requests[static_cast<std::size_t>(i)];
          if (q.prompt_logits) {
            const double err = relative_error(r.logits.values, reference_logits(m, q.generation.prompt));
            QVERIFY2(err <= 1e-5, qPrintable(QStringLiteral("%1 %2 %3 request %4: %5")
                                                 .arg(QString::fromStdString(arch), QString::fromUtf8(miss), QString::fromUtf8(cpu_weights_name(weights)))
                                                 .arg(i)
                                                 .arg(err)));
          } else {
            QCOMPARE(r.tokens, generate(m, {.prompt = q.generation.prompt, .max_new_tokens = 8}).tokens);
          }
        }
        QVERIFY(engine.stats().largest_step_sequences >= 2);
      }
    }
  }

  // tst_cuda_backend's mid-size family (bf16; norms 1 + N(0, 0.02), eps 1e-5, 8 heads over 2 KV heads of
  // 64, rope theta 1e6), which the CUDA backend is held to within 2e-2 of the CPU runtime: the CPU
  // runtime itself is the reference forward on it, for a prompt of more rows than the skinny kernel
  // takes (70) and for one of fewer, read in place and widened.
  void midSizeSyntheticFamilyIsTheReference() {
    const ModelSpec spec = mixtral_like_spec(4096, 512, 1024, 4, 8);
    const fs::path dir = scratch("mid-size-40");
    if (!fs::exists(dir / "model.safetensors")) write_synthetic_checkpoint(dir, spec, DType::BF16, 40);
    Family family;
    family.add("v0", dir);
    const HostStore store(family);
    const auto model = Model::load(Checkpoint(dir));
    for (const CpuWeights weights : {CpuWeights::Mapped, CpuWeights::Stored}) {
      Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.cpu_weights = weights}));
      for (const std::size_t n : {std::size_t{70}, std::size_t{20}}) {
        const auto prompt = prompt_of(n, 1, spec.vocab_size);
        const auto logits = engine.submit({"v0", {.prompt = prompt, .max_new_tokens = 0}, true});
        const RequestResult& r = logits->wait();
        QVERIFY2(r.finish == Finish::Length, r.error.c_str());
        const double err = relative_error(r.logits.values, reference_logits(*model, prompt));
        QVERIFY2(err <= 1e-5, qPrintable(QStringLiteral("%1, %2 tokens: %3").arg(QString::fromUtf8(cpu_weights_name(weights))).arg(n).arg(err)));
        const auto tokens = engine.submit({"v0", {.prompt = prompt, .max_new_tokens = 12}});
        const RequestResult& g = tokens->wait();
        QCOMPARE(g.tokens, generate(*model, {.prompt = prompt, .max_new_tokens = 12}).tokens);
      }
    }
  }

  // DeepSeek's ESFT adapters as released (no base_model, "layers.N.…" names, one indexed shard),
  // listed after their base: the tuned experts served over the base by rerouting; one tuning the
  // shared experts too has a non-expert set of its own (sharing every other tensor with the base);
  // one saved by train.py ("model."-prefixed, every non-expert module tuned) as well. Mixed in one
  // batch with the base, each request's logits are those of its adapter alone (the adapter's tensors
  // over the base's, read through Model), and greedy tokens likewise.
  void deepseekAdaptersAsReleased() {
    const ModelSpec spec = parse_model_spec(deepseek_v2_config(), "config.json");
    const fs::path base = scratch("ds-esft-base");
    if (!fs::exists(base)) write_synthetic_checkpoint(base, spec, DType::F32, 21);
    make_deepseek_adapter(base, scratch("ds-esft-experts"), {.experts = {{1, {3, 6}}, {2, {0}}}});
    make_deepseek_adapter(base, scratch("ds-esft-shared"), {.experts = {{1, {5}}, {2, {}}}, .shared_experts = true});
    make_deepseek_adapter(base, scratch("ds-esft-modules"), {.experts = {{1, {1}}, {2, {7}}}, .non_expert_modules = true, .model_prefix = true});
    Family family;
    open_family(family, {base, scratch("ds-esft-experts"), scratch("ds-esft-shared"), scratch("ds-esft-modules")});
    QCOMPARE(family.size(), std::size_t(4));
    const HostStore store(family);
    QVERIFY(store.is_adapter(1) && store.is_adapter(2) && store.is_adapter(3));
    QCOMPARE(store.base_of(1), 0);
    QCOMPARE(store.set_of(1), store.set_of(0));  // tuned experts only: the base's non-expert set
    QVERIFY(store.set_of(2) != store.set_of(0) && store.set_of(3) != store.set_of(0));
    QCOMPARE(store.sets(), 3);
    std::vector<std::unique_ptr<Model>> alone;
    for (const Variant& v : family.variants()) alone.push_back(Model::load(*v.checkpoint));
    Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.hit = HitPolicy::Strict, .resident_sets = 3}));
    std::vector<ServeRequest> requests;
    for (int i = 0; i < 8; ++i)
      requests.push_back({store.name(i % 4), {.prompt = prompt_of(5 + i, 70 + i, spec.vocab_size), .max_new_tokens = i < 4 ? 0 : 6}, i < 4});
    const auto handles = engine.submit_all(requests);
    for (int i = 0; i < 8; ++i) {
      const RequestResult& r = handles[static_cast<std::size_t>(i)]->wait();
      QVERIFY2(r.finish == Finish::Length, r.error.c_str());
      const Model& m = *alone[static_cast<std::size_t>(i % 4)];
      const auto& q = requests[static_cast<std::size_t>(i)];
      if (q.prompt_logits) QVERIFY(relative_error(r.logits.values, reference_logits(m, q.generation.prompt)) <= 1e-5);
      else QCOMPARE(r.tokens, generate(m, {.prompt = q.generation.prompt, .max_new_tokens = 6}).tokens);
    }
    // Each adapter is another model than its base (its tensors were scaled).
    const auto ids = prompt_of(9, 1, spec.vocab_size);
    for (std::size_t a = 1; a < 4; ++a) QVERIFY(relative_error(reference_logits(*alone[a], ids), reference_logits(*alone[0], ids)) > 1e-4);
  }

  // Issue 58 #10 against transformers itself: DeepSeek-V2 and V3's base, a fine-tune, an ESFT variant
  // and DeepSeek's released adapter of it (over the base, by rerouting) in one continuous batch
  // through the engine, each request's logits those transformers computed for its variant alone
  // (tests/data/hf-tiny/make_deepseek.py), and greedy tokens likewise; the fixtures' references do
  // not pass through Mosaic's own reference forward.
  void deepseekFixturesMixedInOneBatchAreTransformers() {
    for (const char* name : {"deepseek_v2", "deepseek_v3"}) {
      const fs::path dir = fixture(name);
      // A released adapter's base is the last full checkpoint listed before it.
      const std::vector<std::string> variants{"base", "esft-released", "ft1", "esft1"};
      std::vector<fs::path> dirs;
      for (const std::string& v : variants) dirs.push_back(dir / v);
      Family family;
      open_family(family, dirs);
      const HostStore store(family);
      QVERIFY(store.is_adapter(store.index("esft-released")) && store.base_of(store.index("esft-released")) == store.index("base"));
      const SafetensorsFile ref(dir / "reference.safetensors");
      const auto ids = read_i64(ref, "input_ids");  // [2, 24]
      const std::size_t len = ids.size() / 2;
      Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.hit = HitPolicy::Strict, .resident_sets = RuntimeConfig::kAutoSets}));
      std::vector<ServeRequest> requests;
      for (const std::string& v : variants) {
        for (std::size_t row = 0; row < 2; ++row)
          requests.push_back({v, {.prompt = {ids.begin() + static_cast<std::ptrdiff_t>(row * len), ids.begin() + static_cast<std::ptrdiff_t>((row + 1) * len)}, .max_new_tokens = 0}, true});
        const auto greedy = read_i64(ref, "greedy." + v);  // 12 prompt ids, then 10 greedy ones
        requests.push_back({v, {.prompt = {greedy.begin(), greedy.begin() + 12}, .max_new_tokens = 10}});
      }
      const auto handles = engine.submit_all(requests);
      for (std::size_t i = 0; i < requests.size(); ++i) {
        const RequestResult& r = handles[i]->wait();
        const std::string& v = requests[i].target;
        QVERIFY2(r.finish == Finish::Length, r.error.c_str());
        if (requests[i].prompt_logits) {
          const auto all = read_f32(ref, "logits." + v);  // [2, 24, vocab]
          const std::size_t row = i % 3, width = all.size() / 2;
          const std::vector<float> want(all.begin() + static_cast<std::ptrdiff_t>(row * width), all.begin() + static_cast<std::ptrdiff_t>((row + 1) * width));
          const double err = relative_error(r.logits.values, want);
          QVERIFY2(err <= 1e-4, qPrintable(QStringLiteral("%1 %2 row %3: %4").arg(QString::fromUtf8(name), QString::fromStdString(v)).arg(row).arg(err)));
        } else {
          const auto greedy = read_i64(ref, "greedy." + v);
          QCOMPARE(r.tokens, std::vector<std::int64_t>(greedy.begin() + 12, greedy.end()));
        }
      }
      QVERIFY(engine.stats().largest_step_sequences >= 4);
    }
  }

  // The host tier on a file of its own: tensors admitted within the budget, the least recently used
  // giving way; one larger than the whole budget streamed in chunks that arrive in order and whole;
  // the reader thread's read-ahead makes a tensor resident so that the next read costs no disk. The
  // process's resident pages of the mapping stay within the budget (smaps), not just the count.
  void hostTierKeepsToItsBudget() {
    constexpr std::size_t MiB = std::size_t{1} << 20;
    const std::vector<std::size_t> sizes{4 * MiB, 4 * MiB, 4 * MiB, HostTier::kChunk + 3 * MiB + 17};
    std::vector<std::byte> data;
    std::mt19937 g(7);
    for (std::size_t n : sizes)
      for (std::size_t i = 0; i < n; ++i) data.push_back(static_cast<std::byte>(g()));
    const fs::path file = scratch("tier.bin");
    write_bytes(file, data);
    const MappedFile map(file);
    const std::uint64_t budget = 9 * MiB;
    HostTier tier(budget);
    std::vector<std::size_t> offset;
    for (std::size_t i = 0, at = 0; i < sizes.size(); at += sizes[i++]) {
      offset.push_back(at);
      QCOMPARE(tier.add(map.bytes().subspan(at, sizes[i])), i);
    }
    // Reads tensor i whole, checking its bytes and that its pieces came in order: the disk bytes and pieces.
    auto read = [&](std::size_t i) {
      std::size_t got = 0, pieces = 0;
      bool same = true;
      const TierRead r = tier.read(i, [&](std::span<const std::byte> chunk, std::size_t at) {
        same = same && at == got && std::equal(chunk.begin(), chunk.end(), data.begin() + static_cast<std::ptrdiff_t>(offset[i] + at));
        got += chunk.size();
        ++pieces;
      });
      if (!same || got != sizes[i] || r.bytes != sizes[i]) return std::pair<std::uint64_t, std::size_t>{~0ull, 0};
      return std::pair<std::uint64_t, std::size_t>{r.disk_bytes, pieces};
    };
    using P = std::pair<std::uint64_t, std::size_t>;
    QCOMPARE(read(0), P(4 * MiB, 1));  // admitted
    QCOMPARE(read(1), P(4 * MiB, 1));
    QCOMPARE(read(0), P(0, 1));  // resident, and now the most recent
    QCOMPARE(read(2), P(4 * MiB, 1));  // 1 gives way
    QCOMPARE(tier.stats().resident_bytes, 8 * MiB);
    QCOMPARE(read(0), P(0, 1));
    QCOMPARE(read(1), P(4 * MiB, 1));  // read again; 2 gives way
    QCOMPARE(read(3), P(sizes[3], 2));  // larger than the budget: two chunks, given back
    QCOMPARE(read(3), P(sizes[3], 2));  // and never resident
    tier.read_ahead(std::vector<std::size_t>{2});
    tier.settle();
    QCOMPARE(tier.stats().ahead_reads, std::int64_t(1));
    QCOMPARE(tier.stats().ahead_bytes, 4 * MiB);
    QCOMPARE(read(2), P(0, 1));  // read ahead: resident
    const TierStats st = tier.stats();
    QVERIFY(st.resident_peak <= budget);
    QCOMPARE(st.disk_reads, std::int64_t(6));
    QCOMPARE(st.disk_bytes, 4 * 4 * MiB + 2 * sizes[3]);
    // What the kernel counts against this process for the mapping: the resident tensors' pages, and no
    // more than a few of fault-around beyond them.
    const std::uint64_t rss = mapped_rss(map.bytes().data());
    QVERIFY2(rss <= budget + MiB, qPrintable(QStringLiteral("%1 bytes resident").arg(rss)));

    // Without a budget everything is resident from the start: no read is from disk.
    HostTier all(std::nullopt);
    all.add(map.bytes().subspan(0, sizes[0]));
    QCOMPARE(all.read(0, [](std::span<const std::byte>, std::size_t) {}).disk_bytes, std::uint64_t(0));
  }

  // A family twice its host budget serves the same logits and tokens as with no budget: experts the
  // tier does not hold come from disk, counted per layer; the tier never holds more than the budget.
  // One request at a time, variants alternating: while one runs, the next one's target's earlier
  // misses are read ahead. Below one non-expert set and the staging chunks, the budget is refused.
  void aHostBudgetChangesNothingServed() {
    const ModelSpec spec = mixtral_like_spec(256, 128, 2048, 2, 8);  // a bf16 expert: 1.5 MiB
    const fs::path dir = scratch("tier-family");
    write_synthetic_family(dir, spec, DType::BF16, 3, [](std::int64_t, std::int64_t e) { return e % 2 == 0; }, 31);
    Family family;
    for (const char* v : {"v0", "v1", "v2"}) family.add(v, dir / v);
    const HostStore all(family);
    QCOMPARE(all.distinct_experts(), 32);
    const std::uint64_t budget = all.non_expert_bytes() + 2 * HostTier::kChunk + 4 * all.expert_bytes();
    QVERIFY(all.host_bytes() > 2 * budget);
    const HostStore tight(family, budget);

    std::vector<ServeRequest> requests;
    for (int i = 0; i < 6; ++i)
      requests.push_back({all.name(i % 3), {.prompt = prompt_of(5 + 2 * i, 90 + i, spec.vocab_size), .max_new_tokens = i < 3 ? 0 : 6}, i < 3});
    auto serve = [&](const HostStore& store) {
      Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.hit = HitPolicy::Strict, .miss = "lru", .resident_sets = 3}),
                    {.scheduler = {.max_sequences = 1}});
      std::vector<RequestResult> out;
      for (const auto& h : engine.submit_all(requests)) out.push_back(h->wait());
      return out;
    };
    const auto want = serve(all), got = serve(tight);
    std::int64_t disk_all = 0, disk_tight = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      QVERIFY2(got[i].finish == Finish::Length, got[i].error.c_str());
      QCOMPARE(got[i].logits.values, want[i].logits.values);
      QCOMPARE(got[i].tokens, want[i].tokens);
      disk_all += want[i].stats.counters.total().disk_loads;
      disk_tight += got[i].stats.counters.total().disk_loads;
    }
    QCOMPARE(disk_all, std::int64_t(0));
    QVERIFY(disk_tight > 0);
    const TierStats st = tight.tier().stats();
    QVERIFY(st.resident_peak <= budget);
    QVERIFY(st.disk_reads > 0 && st.disk_bytes > 0);
    QVERIFY(st.ahead_reads > 0);

    try {
      const HostStore refused(family, all.non_expert_bytes() + HostTier::kChunk);
      QFAIL("a host budget below its minimum was taken");
    } catch (const BudgetError& e) {
      QVERIFY2(std::string(e.what()).find("host budget") != std::string::npos && std::string(e.what()).find("minimum") != std::string::npos, e.what());
    }
  }

  // The adaptive prefetcher: a layer whose prefetched experts go unused stops being predicted, and
  // so does one with nothing to load; each is probed again kProbeAfter steps on, and a useful probe
  // keeps it on. Layers are judged apart.
  void prefetchStopsWherePredictionsDoNotPay() {
    PrefetchGate gate(4);
    auto step = [&](std::int64_t layer, PrefetchOutcome o) {
      const bool asked = gate.wanted(layer);
      gate.observe(layer, asked ? o : PrefetchOutcome{.loads = o.loads, .load_seconds = o.load_seconds});
      return asked;
    };
    // Layer 1: predicted experts never hit (no demand load timed yet: judged on hits alone).
    int first_off = -1;
    for (int i = 0; i < 10 && first_off < 0; ++i) {
      QVERIFY(step(1, {.prefetches = 4, .used = 0}));
      if (!gate.on(1)) first_off = i;
    }
    QCOMPARE(first_off, 2);  // the share used averages 1 → 0.75 → 0.56 → 0.42, under kUseful
    for (std::int64_t i = 0; i < PrefetchGate::kProbeAfter - 1; ++i) QVERIFY(!gate.wanted(1));
    QVERIFY(gate.wanted(1));  // the probe, judged afresh
    gate.observe(1, {.prefetches = 2, .used = 2});
    QVERIFY(gate.on(1));
    for (int i = 0; i < 5; ++i) QVERIFY(step(1, {.prefetches = 2, .used = 1}));  // half used: kept
    QVERIFY(gate.on(1));

    // Layer 2: every prefetch is used, but the step waits for them longer than the demand loads
    // they replace would have taken (the link is the bottleneck, nothing hides the copies).
    QVERIFY(step(2, {.prefetches = 1, .used = 1, .loads = 2, .prefetch_seconds = 1e-3, .load_seconds = 2e-3}));
    QVERIFY(gate.on(2));  // a wait of 1 ms for one prefetch against a saved load of 1 ms: even
    QVERIFY(step(2, {.prefetches = 3, .used = 3, .loads = 1, .prefetch_seconds = 4e-3, .load_seconds = 1e-3}));
    QVERIFY(!gate.on(2));
    // Layer 3: the copies hide behind compute (waits short against the loads saved): kept on.
    for (int i = 0; i < 20; ++i)
      QVERIFY(step(3, {.prefetches = 3, .used = 2, .loads = 1, .prefetch_seconds = 0.2e-3, .load_seconds = 1e-3}));

    // Layer 0: everything predicted is in already, for kIdleSteps steps: nothing to gain.
    for (std::int64_t i = 0; i < PrefetchGate::kIdleSteps; ++i) QVERIFY(step(0, {}));
    QVERIFY(!gate.on(0) && !gate.wanted(0));
    QVERIFY(gate.on(1) && gate.on(3));
    QCOMPARE(gate.skipped(), PrefetchGate::kProbeAfter - 1 + 1);
  }

  void prefetchPlansAroundWhatThePredictionHits() {
    // Layer 1 of two full fine-tunes: 2 pinned slots, 3 spare. Bible's expert 0 is pinned; its
    // experts 5 and 6 sit in spare slots (5 used longer ago), one spare slot is empty.
    Family family;
    open_family(family, {sample_family() / "bible", sample_family() / "fortunes"});
    const HostStore store(family);
    const int bible = store.index("bible"), fortunes = store.index("fortunes");
    const std::int64_t layer = 1;
    RerouteTable table(store.targets(), store.spec().num_experts);
    SlotPool pool(2, 3, 0), scratch(0, 0, 2);
    const auto policy = make_miss_policy("prefetch");
    QVERIFY(policy && policy->prefetches() && policy->keeps_misses());
    auto put = [&](std::int32_t slot, std::int64_t e) {
      pool.fill(slot, store.source(bible, layer, e), store.expert(bible, layer, e));
      table.set(bible, e, slot);
    };
    put(0, 0);
    put(2, 5);
    put(3, 6);
    const LayerSlots slots{layer, table, pool, scratch, store, *policy};

    // Bible's token predicts 0 and 6 (both in: slot 3 must not be evicted); fortunes' predicts 3
    // and 4, which go to the empty slot, then over bible's 5.
    const std::vector<int> rows{bible, fortunes};
    auto loads = plan_prefetch(slots, std::vector<std::int64_t>{0, 6, 3, 4}, 2, rows);
    QCOMPARE(loads.size(), std::size_t(2));
    QCOMPARE(loads[0].slot, (SlotRef{false, 4}));
    QCOMPARE(loads[1].slot, (SlotRef{false, 2}));
    QCOMPARE(loads[0].pair, std::int64_t(2));
    QCOMPARE(loads[1].pair, std::int64_t(3));
    QCOMPARE(loads[0].content, store.expert(fortunes, layer, 3));
    QCOMPARE(table.at(fortunes, 3), 4);
    QCOMPARE(table.at(fortunes, 4), 2);
    QCOMPARE(table.at(bible, 5), RerouteTable::kMiss);  // evicted
    QCOMPARE(table.at(bible, 6), 3);
    QVERIFY(pool.ahead(4) && pool.ahead(2) && !pool.ahead(3) && !pool.ahead(0));

    // The layer then routes: fortunes' 3 hits the prefetched slot (the prefetch was used), its 7 misses.
    const RoutePlan plan = plan_routes(slots, std::vector<std::int64_t>{3, 7}, 2, std::vector<int>{fortunes});
    QCOMPARE(plan.outcome[0], PairOutcome::Hit);
    QCOMPARE(plan.outcome[1], PairOutcome::Miss);
    QCOMPARE(plan.ahead_used, std::vector<std::int64_t>{0});
    QVERIFY(!pool.ahead(4));
    std::vector<std::vector<LayerCounts>> counts(1, std::vector<LayerCounts>(4));
    count_outcomes(plan, 2, std::vector<int>{0}, layer, counts);
    QCOMPARE(counts[0][1].prefetch_used, std::int64_t(1));

    // More predicted misses than spare slots: the rest are left to miss, never put in scratch.
    loads = plan_prefetch(slots, std::vector<std::int64_t>{1, 2, 5, 7}, 2, std::vector<int>{fortunes, bible});
    QVERIFY(loads.size() <= 3);
    for (const ExpertLoad& l : loads) QVERIFY(!l.slot.scratch && pool.role(l.slot.slot) == SlotPool::Role::Spare);
    for (std::int64_t s = 0; s < scratch.size(); ++s) QCOMPARE(scratch.content(s), ExpertId(-1));
  }

  void prefetchServesTheSameTokensWithFewerMisses() {
    // Bible's experts 0–3 pinned in every layer, consolidated: the other fine-tunes' tokens that
    // route to 4–7 miss, into 3 spare slots a layer. Prefetching the next layer's experts from this
    // layer's input must change nothing a request gets, and turn misses into hits on real text.
    Family family;
    open_family(family, {sample_family() / "bible", sample_family() / "fortunes", sample_family() / "jargon",
                         sample_family() / "c-headers"});
    const HostStore store(family);
    const ModelSpec& s = store.spec();
    std::vector<PinnedExpert> pinned;
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      for (std::int64_t e = 0; e < 4; ++e) pinned.push_back({l, e, store.index("bible")});
    const std::int64_t spare = 3, context = 96;
    const std::uint64_t budget = budget_for(family, static_cast<std::int64_t>(pinned.size()) + spare * s.num_layers, 0, context);
    const Tokenizer tok = Tokenizer::load(sample_family() / "bible" / "tokenizer.json");
    const std::vector<std::pair<std::string, std::string>> asks{
        {"fortunes", "You will be successful in your work, and"},
        {"jargon", "hacker n. [originally, someone who makes furniture with an axe]"},
        {"c-headers", "#include <stdio.h>\nint main(int argc, char **argv)"}};
    std::map<std::string, std::int64_t> skipped;  // the gate's, by policy (-1: none)
    auto serve = [&](const std::string& miss) {
      auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = pinned, .miss = miss, .budget_bytes = budget,
                                                               .reserve = {.context_tokens = context, .requests = 1}});
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        if (rt->slots(l).count(SlotPool::Role::Spare) != spare) throw std::logic_error("the budget did not give 3 spare slots");
      Engine engine(rt);
      std::vector<ServeRequest> requests;
      for (const auto& [target, text] : asks) requests.push_back({target, {.prompt = tok.encode(text), .max_new_tokens = 24}});
      std::vector<RequestResult> out;
      for (const auto& h : engine.submit_all(requests)) out.push_back(h->wait());
      skipped[miss] = rt->prefetch_gate() ? rt->prefetch_gate()->skipped() : -1;
      return out;
    };
    const auto lru = serve("lru"), ahead = serve("prefetch-always");  // the predictor, at every layer and step
    std::int64_t misses_lru = 0, misses_ahead = 0, prefetches = 0, used = 0;
    for (std::size_t i = 0; i < asks.size(); ++i) {
      QCOMPARE(ahead[i].tokens, lru[i].tokens);
      const LayerCounts a = ahead[i].stats.counters.total(), b = lru[i].stats.counters.total();
      QCOMPARE(a.hits + a.misses, b.hits + b.misses);  // the same pairs routed
      QCOMPARE(b.prefetches, std::int64_t(0));
      QCOMPARE(ahead[i].stats.counters.layers[0].prefetches, std::int64_t(0));  // nothing comes before the first layer
      QCOMPARE(ahead[i].stats.bytes_moved(), a.load_bytes + a.prefetch_bytes + ahead[i].stats.counters.swap_bytes);
      misses_lru += b.misses;
      misses_ahead += a.misses;
      prefetches += a.prefetches;
      used += a.prefetch_used;
    }
    qInfo("misses: lru %lld, prefetch %lld; prefetches %lld, of which used %lld", static_cast<long long>(misses_lru),
          static_cast<long long>(misses_ahead), static_cast<long long>(prefetches), static_cast<long long>(used));
    QVERIFY(prefetches > 0);
    QVERIFY(used > 0 && used <= prefetches);
    QVERIFY2(misses_ahead < misses_lru, "the prefetches turned no miss into a hit");
    QCOMPARE(skipped["prefetch-always"], std::int64_t(-1));

    // Adaptive: the CPU has no copy engine, so a prefetch's copy is never hidden and can at best
    // tie with the demand load it replaces. The gate sees that and stops predicting most steps.
    const auto gated = serve("prefetch");
    std::int64_t gated_prefetches = 0;
    for (std::size_t i = 0; i < asks.size(); ++i) {
      QCOMPARE(gated[i].tokens, lru[i].tokens);
      gated_prefetches += gated[i].stats.counters.total().prefetches;
    }
    qInfo("adaptive: %lld prefetches, %lld predictions skipped", static_cast<long long>(gated_prefetches),
          static_cast<long long>(skipped["prefetch"]));
    QVERIFY(skipped["prefetch"] > 0);
    QVERIFY(gated_prefetches < prefetches / 2);
  }

  void maskedGatingIsTheMaskedRouter() {
    // Pinned: the base's experts everywhere but two per layer, and none of the adapter's tuned
    // ones. Masked gating must equal the router with every other expert at −inf before top-k.
    Family family;
    open_family(family, {sample_family() / "esft-bible"});
    const HostStore store(family);
    const ModelSpec& s = store.spec();
    const int base = store.index("base"), adapter = store.index("esft-bible");
    std::vector<PinnedExpert> pinned;
    std::vector<std::vector<bool>> allowed(static_cast<std::size_t>(s.num_layers), std::vector<bool>(static_cast<std::size_t>(s.num_experts)));
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      for (std::int64_t e = 0; e < s.num_experts; ++e) {
        if ((e + l) % 4 == 1) continue;
        pinned.push_back({l, e, base});
        bool tuned = false;
        for (const auto& [tl, te] : store.tuned(adapter)) tuned |= tl == l && te == e;
        allowed[static_cast<std::size_t>(l)][static_cast<std::size_t>(e)] = !tuned;
      }
    auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = pinned, .hit = HitPolicy::Strict, .miss = "masked"});
    Engine engine(rt);
    const auto ids = prompt_of(30, 5, s.vocab_size);
    const auto h = engine.submit({"esft-bible", {.prompt = ids, .max_new_tokens = 0}, true});
    const RequestResult& r = h->wait();
    const auto model = Model::load(*family.find("esft-bible")->checkpoint);
    QVERIFY(relative_error(r.logits.values, reference_logits(*model, ids, &allowed)) <= 1e-5);
    QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));
    QCOMPARE(r.stats.counters.total().loads, std::int64_t(0));
    // And it is not the unmasked model.
    QVERIFY(relative_error(r.logits.values, reference_logits(*model, ids)) > 1e-3);
  }

  void hostStoreHoldsTheBaseOnce() {
    Family family;
    open_family(family, {sample_family() / "esft-bible", sample_family() / "esft-fortunes", sample_family() / "esft-jargon",
                         sample_family() / "esft-c-headers"});
    const HostStore store(family);
    const Variant& base = *family.find("base");
    std::uint64_t tuned = 0;
    for (const Variant& v : family.variants())
      for (const auto& [l, e] : v.checkpoint->adapter_experts()) tuned += v.checkpoint->expert_bytes(l, e);
    QVERIFY(tuned > 0);
    QCOMPARE(store.host_bytes(), base.checkpoint->total_bytes() + tuned);
    QCOMPARE(store.sets(), 1);  // every adapter shares its base's non-expert set
    for (int t = 0; t < store.targets(); ++t) QCOMPARE(store.set_of(t), 0);
    const int adapter = store.index("esft-bible");
    QCOMPARE(store.base_of(adapter), store.index("base"));
    const auto [l, e] = store.tuned(adapter).front();
    QCOMPARE(store.source(adapter, l, e), ExpertSource::adapter(adapter, e));
    const std::int64_t other = (e + 1) % store.spec().num_experts;
    QCOMPARE(store.expert(adapter, l, other), store.expert(store.index("base"), l, other));
  }

  // The decode kernel over bf16 weights is the fp32 kernel over the widened weights, bit for bit, on
  // ragged shapes (odd rows, K not a multiple of 16, a row range that starts odd), the same for a row
  // of x alone as in a batch, and within float rounding of a double-precision product.
  void skinnyGemmOverBf16IsTheWidenedProduct() {
    std::mt19937 gen(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::int64_t M : {1, 2, 3, 4, 5, 7, 8, 9})
      for (std::int64_t K : {1, 7, 8, 16, 33, 1027})
        for (std::int64_t N : {1, 2, 3, 6, 65}) {
          std::vector<float> x(static_cast<std::size_t>(M * K)), wide(static_cast<std::size_t>(N * K));
          std::vector<std::uint16_t> w(wide.size());
          for (float& v : x) v = normal(gen);
          for (std::size_t i = 0; i < w.size(); ++i) {  // bf16: a float's high half
            const float f = normal(gen);
            std::uint32_t bits;
            std::memcpy(&bits, &f, 4);
            w[i] = static_cast<std::uint16_t>(bits >> 16);
            bits = static_cast<std::uint32_t>(w[i]) << 16;
            std::memcpy(&wide[i], &bits, 4);
          }
          const std::int64_t n0 = N > 2 ? 1 : 0;  // a range from an odd row, as a thread's may not be
          std::vector<float> a(static_cast<std::size_t>(M * N), -1.0f), b = a;
          skinny_gemm_bf16(x.data(), M, K, w.data(), n0, N, a.data(), N);
          skinny_gemm(x.data(), M, K, wide.data(), n0, N, b.data(), N);
          QVERIFY2(a == b, qPrintable(QStringLiteral("M %1 K %2 N %3").arg(M).arg(K).arg(N)));
          // Each product is the same whatever batch it is in and however the rows are split (over
          // threads): every row of x alone, over w's rows in two ranges split at an odd row.
          std::vector<float> c(a.size(), -1.0f);
          const std::int64_t cut = n0 + (N - n0) / 2 + ((N - n0) / 2 % 2 == 0 ? 1 : 0);
          for (std::int64_t m = 0; m < M; ++m) {
            skinny_gemm_bf16(x.data() + m * K, 1, K, w.data(), n0, std::min(cut, N), c.data() + m * N, N);
            skinny_gemm_bf16(x.data() + m * K, 1, K, w.data(), std::min(cut, N), N, c.data() + m * N, N);
          }
          QVERIFY2(a == c, qPrintable(QStringLiteral("one row at a time: M %1 K %2 N %3").arg(M).arg(K).arg(N)));
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              const float got = a[static_cast<std::size_t>(m * N + n)];
              if (n < n0) {
                QCOMPARE(got, -1.0f);  // rows outside the range untouched
                continue;
              }
              double ref = 0, scale = 0;
              for (std::int64_t k = 0; k < K; ++k) {
                const double p = static_cast<double>(x[static_cast<std::size_t>(m * K + k)]) * wide[static_cast<std::size_t>(n * K + k)];
                ref += p;
                scale += std::abs(p);
              }
              QVERIFY2(std::abs(got - ref) <= 1e-5 * scale + 1e-30, qPrintable(QStringLiteral("M %1 K %2 N %3: %4 vs %5").arg(M).arg(K).arg(N).arg(got).arg(ref)));
            }
        }
  }

  // Core's at::parallel_for runs on LibTorch's intra-op threads. ATen's template runs every range on
  // the calling thread unless the code that calls it is compiled with OpenMP, and the CPU backend's
  // own kernels (skinny GEMMs, experts, decode attention) then used one core whatever --threads said.
  void coreParallelForUsesTheIntraOpThreads() {
#if defined(__SANITIZE_THREAD__)
    QSKIP("ThreadSanitizer builds leave OpenMP out (libgomp's barriers are invisible to it): ranges run on the caller");
#endif
    const int before = configured_threads();
    configure_threads(2);
    const int used = parallel_for_threads();
    configure_threads(before);
    QCOMPARE(used, 2);
  }

  // Loading's one-off parallel work runs on a passing thread: f runs there, not on the caller, and
  // what it throws comes back to the caller as it was thrown.
  void onPassingThreadRunsElsewhereAndRethrows() {
    std::thread::id ran;
    on_passing_thread([&] { ran = std::this_thread::get_id(); });
    QVERIFY(ran != std::thread::id() && ran != std::this_thread::get_id());
    expect_mentions(error_of<InvalidArgument>([] { on_passing_thread([] { throw InvalidArgument("runtime", "a weight", "is bad", "fix it"); }); }),
                    {"a weight", "is bad"});
  }

  // Decode attention over the paged pool, on ragged shapes: sequences of 1, 2, 17, 40, 300 and 700
  // positions whose rows lie in scattered blocks, grouped query heads (4 per kv head, and 1), head
  // widths that are not multiples of 8, a latent layout (the value a prefix of the key row, one kv
  // head), long sequences split into parts and merged — against a double-precision
  // softmax(q·kᵀ·scale)·v. The step's other tokens' rows are left untouched.
  void decodeAttentionReadsEachSequencesRowsWhereTheyLie() {
    std::mt19937 gen(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    struct Shape { int heads, kv_heads, key_dim, value_dim; bool latent; };
    struct Case { Shape sh; int threads; std::vector<std::int64_t> lengths; };
    for (const auto& [sh, threads, lengths] : {Case{{8, 2, 20, 20, false}, 2, {1, 17, 2, 40}}, Case{{3, 3, 8, 8, false}, 2, {1, 17, 2, 40}},
                                               Case{{4, 1, 37, 29, true}, 2, {1, 17, 2, 40}}, Case{{2, 2, 128, 128, false}, 2, {1, 17, 2, 40}},
                                               // split: 300 rows into 2 parts for 3 threads (128 rows at least each); 700 into 2
                                               // for 4 threads, beside a sequence of 1 row, whole
                                               Case{{8, 2, 20, 20, false}, 3, {300}}, Case{{4, 1, 37, 29, true}, 4, {700, 1}}}) {
      const std::int64_t B = static_cast<std::int64_t>(lengths.size()), pool = 1024, tokens = B + 2;
      const int kvh = sh.kv_heads, rep = sh.heads / kvh;
      const std::int64_t key_row = kvh * sh.key_dim, value_row = sh.latent ? key_row : kvh * sh.value_dim;
      std::vector<float> keys(static_cast<std::size_t>(pool * key_row)), values(static_cast<std::size_t>(pool * value_row));
      for (float& v : keys) v = normal(gen);
      for (float& v : values) v = normal(gen);
      const float* value_base = sh.latent ? keys.data() : values.data();
      // Rows from a shuffled pool, in blocks of 4 as the block table hands them out.
      std::vector<std::int64_t> blocks(static_cast<std::size_t>(pool / 4));
      std::iota(blocks.begin(), blocks.end(), 0);
      std::shuffle(blocks.begin(), blocks.end(), gen);
      // The decode tokens' places among a step's B + 2 tokens, out of order; the last two are another chunk's.
      std::vector<std::int64_t> token_of{1, 3, 0, 2};
      token_of.resize(static_cast<std::size_t>(B));
      std::vector<std::int64_t> rows, begin{0};
      std::size_t next_block = 0;
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t p = 0; p < lengths[static_cast<std::size_t>(b)]; ++p) {
          if (p % 4 == 0) ++next_block;
          rows.push_back(blocks[next_block - 1] * 4 + p % 4);
        }
        begin.push_back(static_cast<std::int64_t>(rows.size()));
      }
      std::vector<float> q(static_cast<std::size_t>(tokens * sh.heads * sh.key_dim)), out(static_cast<std::size_t>(tokens * sh.heads * sh.value_dim), -7.0f);
      for (float& v : q) v = normal(gen);
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.key_dim));
      const DecodeAttention a{.q = q.data(), .out = out.data(), .tokens = token_of.data(), .keys = keys.data(), .values = value_base,
                              .key_row = key_row, .value_row = value_row, .rows = rows.data(), .begin = begin.data(), .heads = sh.heads,
                              .kv_heads = kvh, .key_dim = sh.key_dim, .value_dim = sh.value_dim, .scale = scale};
      // Two threads' ranges, run one after the other (the split and merge, not concurrency, is what
      // this checks). With as many sequences as threads nothing splits; with fewer, a sequence of
      // 256 rows or more does (parts take 128 rows at least).
      const ParallelRanges two_ranges = [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f) {
        f(0, n / 2);
        f(n / 2, n);
      };
      decode_attention(a, B, threads, two_ranges);
      const QString what = QStringLiteral("heads %1/%2, dims %3/%4").arg(sh.heads).arg(kvh).arg(sh.key_dim).arg(sh.value_dim);
      for (std::int64_t t = 0; t < tokens; ++t) {
        const auto at = std::find(token_of.begin(), token_of.end(), t);
        for (int h = 0; h < sh.heads; ++h)
          for (int d = 0; d < sh.value_dim; ++d) {
            const float got = out[static_cast<std::size_t>((t * sh.heads + h) * sh.value_dim + d)];
            if (at == token_of.end()) {
              QCOMPARE(got, -7.0f);
              continue;
            }
            const auto b = static_cast<std::size_t>(at - token_of.begin());
            const int g = h / rep;
            std::vector<double> w;
            double m = -1e300, sum = 0;
            for (auto i = begin[b]; i < begin[b + 1]; ++i) {
              double dot = 0;
              for (int k = 0; k < sh.key_dim; ++k)
                dot += static_cast<double>(q[static_cast<std::size_t>((t * sh.heads + h) * sh.key_dim + k)]) *
                       keys[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)] * key_row + g * sh.key_dim + k)];
              w.push_back(dot * scale);
              m = std::max(m, w.back());
            }
            for (double& x : w) sum += (x = std::exp(x - m));
            double ref = 0;
            for (auto i = begin[b]; i < begin[b + 1]; ++i)
              ref += w[static_cast<std::size_t>(i - begin[b])] / sum *
                     value_base[static_cast<std::size_t>(rows[static_cast<std::size_t>(i)] * value_row + g * sh.value_dim + d)];
            QVERIFY2(std::abs(got - ref) <= 2e-5 * (1 + std::abs(ref)),
                     qPrintable(what + QStringLiteral(": token %1 head %2 dim %3: %4 vs %5").arg(t).arg(h).arg(d).arg(got).arg(ref)));
          }
      }
    }
  }

  // The CPU backend keeps bf16 weights as stored and widens them as it reads: the same logits and
  // tokens as weights widened when loaded, bit for bit (prompts around the skinny kernel's 64 rows,
  // decode batches of 1 and 10), on half the heap; read in place from the mapped files, the same
  // again on less than half of that.
  void bf16WeightsHeldAsStoredAreFp32BitForBit() {
    Family family;
    open_family(family, {sample_family() / "base"});
    const HostStore store(family);
    QCOMPARE(store.tensor(store.expert_tensors(0).gate).dtype, DType::BF16);
    const std::int64_t vocab = store.spec().vocab_size;
    struct Served {
      std::vector<std::vector<float>> logits;
      std::vector<std::vector<std::int64_t>> tokens;
      std::size_t heap = 0;  // what the runtime allocated, loaded
    };
    auto serve = [&](CpuWeights weights) {
      Served out;
      const std::size_t before = mallinfo2().uordblks + mallinfo2().hblkhd;
      auto runtime = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = every_position(store.spec(), 0), .hit = HitPolicy::Strict,
                                                                    .cpu_weights = weights});
      Engine engine(runtime);
      for (std::size_t length : {3, 13, 64, 65}) {
        const auto handle = engine.submit({"base", {.prompt = prompt_of(length, length, vocab), .max_new_tokens = 0}, true});
        out.logits.push_back(handle->wait().logits.values);
      }
      for (std::size_t batch : {1, 10}) {
        std::vector<ServeRequest> requests;
        for (std::size_t i = 0; i < batch; ++i) requests.push_back({"base", {.prompt = prompt_of(4 + i, 40 + i, vocab), .max_new_tokens = 6}});
        for (const auto& h : engine.submit_all(std::move(requests))) out.tokens.push_back(h->wait().tokens);
      }
      out.heap = mallinfo2().uordblks + mallinfo2().hblkhd - before;
      return out;
    };
    const Served stored = serve(CpuWeights::Stored), widened = serve(CpuWeights::Fp32), mapped = serve(CpuWeights::Mapped);
    QCOMPARE(stored.logits.size(), std::size_t(4));
    for (const Served* other : {&stored, &mapped}) {
      for (std::size_t i = 0; i < other->logits.size(); ++i)
        QVERIFY2(other->logits[i] == widened.logits[i],
                 qPrintable(QStringLiteral("prompt %1: relative error %2").arg(i).arg(relative_error(other->logits[i], widened.logits[i]))));
      QCOMPARE(other->tokens, widened.tokens);
    }
    if (stored.heap == 0 && widened.heap == 0)  // a sanitizer's allocator: mallinfo2 sees none of it
      QSKIP("the bits matched; the heap held is not measurable under this build's allocator");
    QVERIFY2(static_cast<double>(widened.heap) > 1.6 * static_cast<double>(stored.heap),
             qPrintable(QStringLiteral("heap held: %1 widened, %2 as stored").arg(widened.heap).arg(stored.heap)));
    // Read in place, the weights take no heap: what is left is the KV cache, the fp32 norms and the step's.
    QVERIFY2(static_cast<double>(stored.heap) > 2.0 * static_cast<double>(mapped.heap),
             qPrintable(QStringLiteral("heap held: %1 as stored, %2 read in place").arg(stored.heap).arg(mapped.heap)));
  }

  void plannerAndRuntimeCountTheSameBytes() {
    // For budgets across the range, the layout the planner makes for budget B runs under B, and the
    // runtime's reservations are the planner's to the byte.
    std::vector<std::pair<std::string, std::vector<fs::path>>> cases;
    for (const auto& fam : families()) {
      std::vector<fs::path> dirs;
      for (const auto& v : variants()) dirs.push_back(fixture(fam, v));
      cases.emplace_back(fam, dirs);
    }
    cases.emplace_back("sample", std::vector<fs::path>{sample_family()});
    for (const auto& [name, dirs] : cases) {
      Family family;
      open_family(family, dirs);
      const HostStore store(family);
      const auto a = analyze_family(family);
      const CapacityPlan unlimited = plan_capacity(family, std::uint64_t(1) << 50);
      QCOMPARE(store.non_expert_bytes(), unlimited.non_expert_bytes);
      QCOMPARE(store.expert_bytes(), unlimited.bytes_per_expert);
      for (std::int64_t experts : {std::int64_t(0), std::int64_t(3), unlimited.positions / 2, unlimited.positions}) {
        const std::uint64_t budget = unlimited.minimum_budget() + static_cast<std::uint64_t>(experts) * unlimited.bytes_per_expert + 7;
        const CapacityPlan cap = plan_capacity(family, budget);
        QCOMPARE(cap.capacity, experts);
        const Layout layout = make_layout(family, a->sha256, plan_consolidation(a->distances, cap.capacity, Policy::RoundRobin));
        const Runtime rt(store, {.pinned = pinned_from_layout(layout, match_layout(layout, family, a->sha256, "l")), .budget_bytes = budget});
        QCOMPARE(rt.budget().used(), cap.minimum_budget() + static_cast<std::uint64_t>(cap.capacity) * cap.bytes_per_expert);
        QVERIFY(rt.budget().used() <= budget);
        expect_mentions(error_of<BudgetError>([&] {
          Runtime(store, {.pinned = pinned_from_layout(layout, match_layout(layout, family, a->sha256, "l")),
                          .budget_bytes = rt.budget().used() - 1});
        }), {"device budget", "raise the budget"});
      }
    }
  }

  void preemptedOutputEqualsUninterrupted() {
    // Two long generations that cannot both hold their KV cache: the newer is preempted and
    // recomputed; with sampling on, its tokens are those of a run that was never interrupted.
    Family family;
    open_family(family, {sample_family() / "bible"});
    const HostStore store(family);
    std::vector<PinnedExpert> all;
    for (std::int64_t l = 0; l < 4; ++l)
      for (std::int64_t e = 0; e < 8; ++e) all.push_back({l, e, 0});
    auto make = [&](std::int64_t kv_tokens) {
      return std::make_shared<Runtime>(store, RuntimeConfig{.pinned = all, .budget_bytes = budget_for(family, 32, 0, kv_tokens),
                                                            .reserve = {.context_tokens = kv_tokens, .requests = 1}});
    };
    const GenerationRequest g{.prompt = prompt_of(20, 9, 1024), .max_new_tokens = 40, .sampling = {.temperature = 0.9, .seed = 7}};
    Engine tight(make(96));  // 6 blocks: one sequence of 60 tokens needs 4
    const auto a = tight.submit({"bible", g}), b = tight.submit({"bible", g});
    const RequestResult& ra = a->wait();
    const RequestResult& rb = b->wait();
    QCOMPARE(ra.stats.preemptions + rb.stats.preemptions > 0, true);
    Engine roomy(make(256));
    const auto solo = roomy.submit({"bible", g});
    const RequestResult& alone = solo->wait();
    QCOMPARE(alone.stats.preemptions, std::int64_t(0));
    QCOMPARE(ra.tokens, alone.tokens);
    QCOMPARE(rb.tokens, alone.tokens);
    // Admission that reserves each sequence's longest (60 tokens: 4 of the 6 blocks) starts the
    // second once the first has ended: none preempted, the same tokens.
    Engine reserving(make(96), {.scheduler = {.kv_admission = KvAdmission::Reserve}});
    const auto c = reserving.submit({"bible", g}), d = reserving.submit({"bible", g});
    const RequestResult& rc = c->wait();
    const RequestResult& rd = d->wait();
    QCOMPARE(rc.stats.preemptions + rd.stats.preemptions, std::int64_t(0));
    QVERIFY(rd.stats.first_token >= rc.stats.finish);
    QCOMPARE(rc.tokens, alone.tokens);
    QCOMPARE(rd.tokens, alone.tokens);
    // A request whose KV cache could never fit is refused at once.
    expect_mentions(error_of<BudgetError>([&] { tight.submit({"bible", {.prompt = g.prompt, .max_new_tokens = 200}}); }),
                    {"KV cache of 220 tokens", "6"});
  }

  void timeSharingSwapsWholeModels() {
    Family family;
    for (const char* v : {"base", "ft1", "ft2"}) family.add(v, fixture("olmoe", v));
    const HostStore store(family);
    std::vector<PinnedExpert> all;
    for (std::int64_t l = 0; l < 3; ++l)
      for (std::int64_t e = 0; e < 8; ++e) all.push_back({l, e, 0});
    auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = all, .hit = HitPolicy::Strict, .whole_model_swaps = true});
    Engine engine(rt, {.scheduler = {.max_sequences = 1}});
    const auto ids = prompt_of(6, 1, 320);
    std::uint64_t first_swap = 0;
    for (const char* t : {"ft1", "ft2", "ft2"}) {
      const auto h = engine.submit({t, {.prompt = ids, .max_new_tokens = 3}});
      const RequestResult& r = h->wait();
      QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));  // the whole model is resident
      QCOMPARE(r.tokens, generate(*Model::load(*family.find(t)->checkpoint), {.prompt = ids, .max_new_tokens = 3}).tokens);
      if (std::string(t) == "ft1") first_swap = r.stats.counters.swap_bytes;
      else if (r.stats.counters.swaps == 0) QCOMPARE(r.stats.counters.swap_bytes, std::uint64_t(0));
    }
    QCOMPARE(first_swap, store.non_expert_bytes() + 24 * store.expert_bytes());
  }

  void badConfigsAreRefused() {
    Family family;
    for (const char* v : {"base", "ft1"}) family.add(v, fixture("mixtral", v));
    const HostStore store(family);
    expect_mentions(error_of<InvalidArgument>([&] { Runtime(store, {.miss = "sometimes"}); }), {"miss policy 'sometimes'"});
    expect_mentions(error_of<InvalidArgument>([&] { Runtime(store, {.pinned = {{0, 9, 0}}}); }), {"pinned expert"});
    expect_mentions(error_of<InvalidArgument>([&] { Runtime(store, {.reserve = {.miss_slots = 0}}); }), {"miss slots"});
    expect_mentions(error_of<InvalidArgument>([&] { Runtime(store, {.whole_model_swaps = true}); }), {"time-sharing"});
    expect_mentions(error_of<BudgetError>([&] { Runtime(store, {.budget_bytes = store.non_expert_bytes() / 2}); }),
                    {"non-expert weights"});
    // Weights read in place cannot be paged out by a host budget.
    const HostStore budgeted(family, std::uint64_t{1} << 30);
    expect_mentions(error_of<InvalidArgument>([&] { Runtime(budgeted, {.cpu_weights = CpuWeights::Mapped}); }),
                    {"--cpu-weights", "mapped", "host budget", "--cpu-weights stored"});
    // A budget past the machine's memory would bound nothing (issue 15, item 14).
    expect_mentions(error_of<InvalidArgument>([&] { Runtime(store, {.budget_bytes = std::uint64_t{1} << 60}); }),
                    {"budget", "1.00 EiB", "more than this machine's memory"});
  }
};

QTEST_GUILESS_MAIN(TestRuntime)
#include "tst_runtime.moc"
