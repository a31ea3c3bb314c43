// Forge: the trainer's model is the runtime's model (same logits from a saved checkpoint), a few
// steps lower the loss, training resumes exactly, ESFT adapters open as checkpoints holding exactly
// the listed tuned experts over their base, and a whole recipe runs, stops and resumes.
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "forge/bpe_trainer.h"
#include "forge/esft_selection.h"
#include "forge/forge.h"
#include "forge/moe_trainer.h"
#include "model/esft_adapter.h"
#include "model/family.h"
#include "runtime/forward.h"
#include "runtime/threads.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;
using nlohmann::json;

// Named, not anonymous: ForgeTest holds a Stream, and in a unity build GCC warns of a class whose
// member's type has internal linkage (-Wsubobject-linkage).
namespace forge_test_parts {

ModelSpec tiny_spec(std::int64_t vocab) {
  json recipe = {{"format", "mosaic.forge/1"}, {"output", "unused"},
                 {"tokenizer", {{"vocab_size", vocab}}},
                 {"model", {{"hidden_size", 64}, {"num_layers", 2}, {"num_heads", 4}, {"num_kv_heads", 2}, {"num_experts", 4},
                            {"top_k", 2}, {"expert_intermediate", 48}, {"max_position_embeddings", 128}}},
                 {"train", {{"seq_len", 64}}},
                 {"domains", {{{"name", "x"}, {"sources", {{{"files", {"unused"}}}}}}}}};
  return parse_recipe(recipe.dump(), "tiny").spec;
}

// The test corpus as one token stream, and `rows` windows of n tokens from it.
struct Stream {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> windows(std::int64_t rows, std::int64_t n, std::int64_t offset) const {
    std::vector<std::int32_t> out;
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto start = static_cast<std::size_t>((offset + r * 97) % static_cast<std::int64_t>(tokens.size() - static_cast<std::size_t>(n)));
      out.insert(out.end(), tokens.begin() + static_cast<std::ptrdiff_t>(start), tokens.begin() + static_cast<std::ptrdiff_t>(start) + n);
    }
    return out;
  }
};

Stream corpus_stream(std::int64_t vocab) {
  std::vector<std::string> texts;
  for (const char* f : {"bible.txt", "fortunes.txt", "jargon.txt", "c-headers.txt"}) texts.push_back(read_text(data_dir() / "corpus" / f));
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  const Tokenizer t = train_byte_level_bpe(views, vocab, {"<pad>", "<s>", "</s>"});
  Stream s;
  for (const auto& text : texts)
    for (auto id : t.encode(text)) s.tokens.push_back(static_cast<std::int32_t>(id));
  return s;
}

double nll_from_runtime(const fs::path& dir, const std::vector<std::int32_t>& window) {
  const Checkpoint ck(dir);
  const auto model = Model::load(ck);
  const std::vector<std::int64_t> ids(window.begin(), window.end() - 1);
  KvCache cache(model->spec(), 1, static_cast<std::int64_t>(ids.size()));
  const Logits logits = forward(*model, cache, ids, LogitsFor::AllPositions);
  double nll = 0;
  for (std::int64_t i = 0; i < logits.rows; ++i) {
    const auto row = logits.row(i);
    double mx = row[0], sum = 0;
    for (float v : row) mx = std::max<double>(mx, v);
    for (float v : row) sum += std::exp(v - mx);
    nll += mx + std::log(sum) - row[static_cast<std::size_t>(window[static_cast<std::size_t>(i + 1)])];
  }
  return nll / static_cast<double>(logits.rows);
}

std::vector<std::byte> bytes_of(const Weight& w) { return {w.data().begin(), w.data().end()}; }

}  // namespace forge_test_parts
using namespace forge_test_parts;

class ForgeTest : public QObject {
  Q_OBJECT
  Stream stream_;
  OptimizerConfig opt_;

 private Q_SLOTS:
  void initTestCase() {
    configure_threads(0);
    stream_ = corpus_stream(400);
    opt_.lr = 3e-3;
    opt_.warmup_steps = 2;
  }

  void a_few_steps_lower_the_loss() {
    auto t = MoeTrainer::fresh(tiny_spec(400), 1, opt_);
    const auto probe = stream_.windows(8, 33, 5);
    const double before = t->loss(probe, 8);
    QVERIFY2(std::abs(before - std::log(400.0)) < 0.5, "fresh weights should predict about uniformly");
    for (int s = 0; s < 30; ++s) t->step(stream_.windows(8, 33, s * 131), 8, learning_rate(opt_, s, 30));
    const double after = t->loss(probe, 8);
    QVERIFY2(after < before - 1.0, (std::to_string(before) + " → " + std::to_string(after)).c_str());
  }

  void trained_model_is_the_runtime_model() {
    QTemporaryDir tmp;
    const fs::path dir = fs::path(tmp.path().toStdString()) / "m";
    auto t = MoeTrainer::fresh(tiny_spec(400), 2, opt_);
    for (int s = 0; s < 5; ++s) t->step(stream_.windows(4, 33, s * 17), 4, 3e-3);
    t->save_checkpoint(dir, DType::F32);
    const auto window = stream_.windows(1, 40, 11);
    const double from_trainer = t->loss(window, 1);
    const double from_runtime = nll_from_runtime(dir, window);
    QVERIFY2(std::abs(from_trainer - from_runtime) < 1e-4, (std::to_string(from_trainer) + " vs " + std::to_string(from_runtime)).c_str());
  }

  void training_resumes_exactly() {
    QTemporaryDir tmp;
    const fs::path state = fs::path(tmp.path().toStdString()) / "s.safetensors";
    auto straight = MoeTrainer::fresh(tiny_spec(400), 3, opt_);
    for (int s = 0; s < 6; ++s) straight->step(stream_.windows(4, 33, s * 29), 4, learning_rate(opt_, s, 6));
    auto first = MoeTrainer::fresh(tiny_spec(400), 3, opt_);
    for (int s = 0; s < 3; ++s) first->step(stream_.windows(4, 33, s * 29), 4, learning_rate(opt_, s, 6));
    first->save_state(state, 3);
    auto resumed = MoeTrainer::fresh(tiny_spec(400), 99, opt_);  // other weights: the state replaces them
    QCOMPARE(resumed->load_state(state), std::int64_t(3));
    for (int s = 3; s < 6; ++s) resumed->step(stream_.windows(4, 33, s * 29), 4, learning_rate(opt_, s, 6));
    const auto probe = stream_.windows(4, 33, 1);
    QVERIFY(std::abs(straight->loss(probe, 4) - resumed->loss(probe, 4)) < 1e-5);
  }

  void esft_adapter_replaces_exactly_the_listed_experts() {
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    auto base = MoeTrainer::fresh(tiny_spec(400), 4, opt_);
    base->save_checkpoint(root / "base", DType::BF16);
    auto tuned = MoeTrainer::from_checkpoint(Checkpoint(root / "base"), opt_);
    const RouterStats stats = tuned->router_stats(stream_.windows(4, 33, 0), 4);
    QCOMPARE(stats.gate_score.size(), std::size_t(2));
    const auto chosen = select_esft_experts(stats, "gate", 0.3);
    QCOMPARE(chosen.size(), std::size_t(2));
    EsftAdapterConfig cfg{{{0, {1}}, {1, {0, 3}}}, "../base"};
    auto listed = [&](const ExpectedTensor& e) {
      if (!e.is_expert()) return false;
      const auto it = cfg.experts.find(e.layer);
      return it != cfg.experts.end() && std::count(it->second.begin(), it->second.end(), e.expert) > 0;
    };
    tuned->set_trainable(listed);
    for (int s = 0; s < 3; ++s) tuned->step(stream_.windows(4, 33, s), 4, 1e-2);
    tuned->save_checkpoint(root / "esft", DType::BF16, listed);
    write_expert_cfg(root / "esft" / kExpertCfgFile, cfg);

    const Checkpoint b(root / "base"), a(root / "esft");
    QCOMPARE(a.adapter_experts().size(), std::size_t(3));
    const SafetensorsFile own(root / "esft" / "model.safetensors");
    QCOMPARE(own.tensors().size(), std::size_t(3 * 3));  // three experts, three matrices each
    int replaced = 0;
    for (const Weight& w : a.weights()) {
      const Weight& bw = b.weight(w.expected.name);
      if (listed(w.expected)) {
        ++replaced;
        QCOMPARE(w.file->path(), own.path());
        QVERIFY2(bytes_of(w) != bytes_of(bw), ("tuned expert unchanged: " + w.expected.name).c_str());
      } else {
        QVERIFY2(bytes_of(w) == bytes_of(bw), ("not listed, yet different: " + w.expected.name).c_str());
      }
    }
    QCOMPARE(replaced, 9);
    Family family;  // an adapter joins a family like any variant
    family.add("base", root / "base");
    family.add("esft", root / "esft");

    // Bad adapters are typed errors naming what is wrong.
    write_expert_cfg(root / "esft" / kExpertCfgFile, {{{0, {1}}}, "../base"});
    QVERIFY(error_of<FormatError>([&] { Checkpoint c(root / "esft"); }).find("is not one of the tensors") != std::string::npos);
    write_expert_cfg(root / "esft" / kExpertCfgFile, {{{0, {1, 9}}, {1, {0, 3}}}, "../base"});
    QVERIFY(error_of<FormatError>([&] { Checkpoint c(root / "esft"); }).find("experts.0") != std::string::npos);
    write_expert_cfg(root / "esft" / kExpertCfgFile, {{{0, {1}}, {1, {0, 3}}}, "../nowhere"});
    QVERIFY(error_of<MissingError>([&] { Checkpoint c(root / "esft"); }).find("nowhere") != std::string::npos);
  }

  void a_recipe_runs_stops_and_resumes() {
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    json domains = json::array();
    for (const char* d : {"bible", "fortunes", "jargon"})
      domains.push_back({{"name", d}, {"heldout_every", 3}, {"sources", {{{"files", {(data_dir() / "corpus" / (std::string(d) + ".txt")).string()}}}}}});
    const json recipe = {{"format", "mosaic.forge/1"}, {"output", (root / "family").string()}, {"work_dir", (root / "work").string()},
                         {"tokenizer", {{"vocab_size", 350}}},
                         {"model", {{"hidden_size", 32}, {"num_layers", 2}, {"num_heads", 2}, {"num_kv_heads", 1}, {"num_experts", 4},
                                    {"top_k", 2}, {"expert_intermediate", 32}, {"max_position_embeddings", 64}}},
                         {"train", {{"seq_len", 24}, {"batch", 2}, {"save_every", 2}, {"eval_windows", 2}}},
                         {"base", {{"steps", 6}}}, {"finetune", {{"steps", 2}}}, {"esft", {{"steps", 2}, {"threshold", 0.3}, {"stats_batches", 2}}},
                         {"domains", domains}};
    const ForgeRecipe r = parse_recipe(recipe.dump(), "test recipe");
    std::vector<std::string> log;
    auto keep = [&](const std::string& line) { log.push_back(line); };
    ForgeOptions limited;
    limited.step_limit = 4;
    run_forge(r, keep, limited);
    QVERIFY(fs::exists(root / "work" / "base.state.safetensors"));
    QVERIFY(!fs::exists(root / "family" / "base" / "model.safetensors"));
    log.clear();
    run_forge(r, keep);
    QVERIFY(std::any_of(log.begin(), log.end(), [](const std::string& l) { return l.find("resuming at step 4 of 6") != std::string::npos; }));
    Family family;
    for (const char* v : {"base", "bible", "fortunes", "jargon", "esft-bible", "esft-fortunes", "esft-jargon"}) {
      family.add(v, root / "family" / v);
      QVERIFY(fs::exists(root / "family" / v / "tokenizer.json"));
    }
    QVERIFY(!family.find("esft-jargon")->checkpoint->adapter_experts().empty());
    QVERIFY(fs::file_size(root / "family" / "heldout" / "bible.txt") > 0);
    const json summary = json::parse(read_text(root / "family" / "forge.json"));
    QVERIFY(summary["heldout_perplexity"]["bible"]["bible"].is_number());
    QVERIFY(!fs::exists(root / "work" / "base.state.safetensors"));

    json changed = recipe;  // the work folder refuses a different recipe
    changed["base"]["steps"] = 7;
    QVERIFY(error_of<MismatchError>([&] { run_forge(parse_recipe(changed.dump(), "changed"), keep); }).find("different recipe") != std::string::npos);
    json missing = recipe;
    missing["work_dir"] = (root / "work2").string();
    missing["domains"][0]["sources"][0]["files"] = {"/nonexistent/*.txt"};
    missing["domains"][0]["package"] = "bible-kjv";
    QVERIFY(error_of<IoError>([&] { run_forge(parse_recipe(missing.dump(), "missing"), keep); }).find("apt-get install bible-kjv") != std::string::npos);
  }
};

QTEST_APPLESS_MAIN(ForgeTest)
#include "tst_forge.moc"
