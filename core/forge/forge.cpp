#include "forge/forge.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/text_file.h"
#include "common/machine.h"
#include "forge/bpe_trainer.h"
#include "forge/esft_selection.h"
#include "forge/moe_trainer.h"
#include "model/checkpoint.h"
#include "model/esft_adapter.h"
#include "model/tokenizer.h"
#include "common/stopwatch.h"

namespace mosaic {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kDoneFile = "forge-stage.json";  // written last: the stage is complete

void write_text(const fs::path& p, const std::string& text) {
  write_file_atomically(p, [&](std::ostream& out) { out << text; });
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}


class Forge {
 public:
  Forge(const ForgeRecipe& r, const ForgeLog& log, const ForgeOptions& o) : r_(r), log_(log), opt_(o) {}

  void run() {
    prepare_work_dir();
    load_corpora();
    make_tokenizer();
    encode_corpora();
    const fs::path base = r_.output / "base";
    if (!stage_done(base)) train_stage("base", -1, MoeTrainer::fresh(r_.spec, r_.seed, r_.base.opt), r_.base, base, {});
    if (stopped()) return;
    for (std::size_t d = 0; d < texts_.size() && !stopped(); ++d) {
      const fs::path dir = r_.output / texts_[d].name;
      if (!stage_done(dir)) train_stage(texts_[d].name, static_cast<int>(d), from(base, r_.finetune.opt), r_.finetune, dir, {});
    }
    for (std::size_t d = 0; d < texts_.size() && !stopped(); ++d) {
      const fs::path dir = r_.output / ("esft-" + texts_[d].name);
      if (!stage_done(dir)) esft_stage(static_cast<int>(d), base, dir);
    }
    if (!stopped()) evaluate();
  }

 private:
  bool stopped() const { return stopped_ || (opt_.stop && opt_.stop->load()); }

  void prepare_work_dir() {
    std::error_code ec;
    fs::create_directories(r_.work_dir, ec);
    fs::create_directories(r_.output, ec);
    if (ec) throw IoError(r_.output.string(), "", "cannot be created: " + ec.message());
    const fs::path saved = r_.work_dir / "recipe.json";
    if (fs::exists(saved) && read_text_file(saved) != r_.text)
      throw MismatchError(r_.work_dir.string(), "recipe.json", "holds a run of a different recipe",
                          "delete " + r_.work_dir.string() + " and " + r_.output.string() + " to start afresh");
    write_text(saved, r_.text);
  }

  void load_corpora() {
    for (const DomainSpec& d : r_.domains) {
      texts_.push_back(load_domain(d));
      const DomainText& t = texts_.back();
      log_("corpus " + d.name + ": " + std::to_string(t.train_bytes()) + " bytes for training in " + std::to_string(t.train.size()) +
           " chunks, " + std::to_string(t.heldout_text().size()) + " held out");
    }
    fs::create_directories(r_.output / "heldout");
    for (const DomainText& t : texts_) write_text(r_.output / "heldout" / (t.name + ".txt"), t.heldout_text());
  }

  void make_tokenizer() {
    const fs::path saved = r_.work_dir / "tokenizer.json";
    if (fs::exists(saved)) {
      tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(saved));
      log_("tokenizer: resumed from " + saved.string());
      return;
    }
    // An equal share of every domain, so that no domain's words dominate the merges.
    std::vector<std::string_view> sample;
    const auto share = static_cast<std::size_t>(r_.tokenizer_sample_bytes / static_cast<std::int64_t>(texts_.size()));
    for (const DomainText& t : texts_) {
      std::size_t taken = 0;
      for (const std::string& c : t.train) {
        if (taken >= share) break;
        sample.push_back(c);
        taken += c.size();
      }
    }
    const auto t0 = SteadyClock::now();
    tokenizer_ = std::make_unique<Tokenizer>(train_byte_level_bpe(sample, r_.vocab_size, {"<pad>", "<s>", "</s>"}));
    tokenizer_->save(saved);
    log_("tokenizer: " + std::to_string(r_.vocab_size) + " tokens trained in " + fmt("%.1f s", seconds_since(t0)));
  }

  void encode_corpora() {
    const auto eos = static_cast<std::int32_t>(r_.spec.eos_token_ids.front());
    for (const DomainText& t : texts_) {
      std::vector<std::int32_t> stream;
      std::size_t bytes = 0;
      for (const std::string& c : t.train) {
        for (std::int64_t id : tokenizer_->encode(c, false)) stream.push_back(static_cast<std::int32_t>(id));
        bytes += c.size();
      }
      stream.push_back(eos);
      if (static_cast<std::int64_t>(stream.size()) <= r_.seq_len + 1)
        throw InvalidArgument("domain " + t.name, "text", "is shorter than one training sequence", "add text or shorten train.seq_len");
      log_("tokens " + t.name + ": " + std::to_string(stream.size()) + " (" + fmt("%.2f", static_cast<double>(bytes) / static_cast<double>(stream.size())) +
           " bytes per token)");
      streams_.push_back(std::move(stream));
      std::vector<std::int32_t> held;
      for (std::int64_t id : tokenizer_->encode(t.heldout_text(), false)) held.push_back(static_cast<std::int32_t>(id));
      heldout_.push_back(std::move(held));
    }
  }

  // `rows` sequences of seq_len+1 tokens from domain `domain`, or from every domain in turn (-1).
  std::vector<std::int32_t> batch(std::uint64_t stage_seed, std::int64_t step, int domain) const {
    std::mt19937_64 rng(stage_seed * 1'000'003ULL + static_cast<std::uint64_t>(step));  // resumable: a function of the step
    const auto n = static_cast<std::size_t>(r_.seq_len + 1);
    std::vector<std::int32_t> out;
    out.reserve(n * static_cast<std::size_t>(r_.batch));
    for (std::int64_t row = 0; row < r_.batch; ++row) {
      const auto d = domain >= 0 ? static_cast<std::size_t>(domain) : static_cast<std::size_t>((row + step) % static_cast<std::int64_t>(streams_.size()));
      const auto& s = streams_[d];
      const std::size_t start = std::uniform_int_distribution<std::size_t>(0, s.size() - n)(rng);
      out.insert(out.end(), s.begin() + static_cast<std::ptrdiff_t>(start), s.begin() + static_cast<std::ptrdiff_t>(start + n));
    }
    return out;
  }

  // Up to eval_windows windows of seq_len+1 tokens spread over a domain's held-out text.
  std::pair<std::vector<std::int32_t>, std::int64_t> eval_windows(std::size_t d) const {
    const auto& s = heldout_[d];
    const auto n = static_cast<std::size_t>(r_.seq_len + 1);
    std::vector<std::int32_t> out;
    const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(r_.eval_windows), s.size() / n);
    const std::size_t stride = count ? s.size() / count : 0;
    for (std::size_t w = 0; w < count; ++w) out.insert(out.end(), s.begin() + static_cast<std::ptrdiff_t>(w * stride), s.begin() + static_cast<std::ptrdiff_t>(w * stride + n));
    return {out, static_cast<std::int64_t>(count)};
  }

  bool stage_done(const fs::path& dir) const {
    if (!fs::exists(dir / kDoneFile)) return false;
    log_("stage " + dir.filename().string() + ": done earlier, kept");
    return true;
  }

  std::unique_ptr<MoeTrainer> from(const fs::path& dir, const OptimizerConfig& opt) const {
    return MoeTrainer::from_checkpoint(Checkpoint(dir), opt);
  }

  std::uint64_t stage_seed(const std::string& name) const { return r_.seed ^ std::hash<std::string>{}(name); }

  // Trains `trainer` for the stage's steps (resuming from work_dir/<name>.state), then writes
  // `dir` (checkpoint, tokenizer, done marker); `include` limits the tensors written.
  void train_stage(const std::string& name, int domain, std::unique_ptr<MoeTrainer> trainer, const StageConfig& stage,
                   const fs::path& dir, const TensorFilter& include, json extra = json::object()) {
    const fs::path state = r_.work_dir / (name + ".state.safetensors");
    std::int64_t step = 0;
    if (fs::exists(state)) {
      step = trainer->load_state(state);
      log_(name + ": resuming at step " + std::to_string(step) + " of " + std::to_string(stage.steps));
    }
    const std::int64_t last = opt_.step_limit >= 0 ? std::min(stage.steps, step + opt_.step_limit) : stage.steps;
    const auto t0 = SteadyClock::now();
    const std::int64_t first_step = step;
    double window = 0, first_loss = NAN, final_loss = NAN;
    std::int64_t in_window = 0;
    for (; step < last; ++step) {
      if (opt_.stop && opt_.stop->load()) break;
      const auto tokens = batch(stage_seed(name), step, domain);
      const double lr = learning_rate(stage.opt, step, stage.steps);
      const auto res = trainer->step(tokens, r_.batch, lr);
      if (std::isnan(first_loss)) first_loss = res.loss;
      final_loss = res.loss;
      window += res.loss;
      ++in_window;
      if ((step + 1) % r_.log_every == 0 || step + 1 == last) {
        const double per_step = seconds_since(t0) / static_cast<double>(step + 1 - first_step);
        log_(name + " step " + std::to_string(step + 1) + "/" + std::to_string(stage.steps) + "  loss " + fmt("%.3f", window / static_cast<double>(in_window)) +
             "  aux " + fmt("%.3f", res.aux_loss) + "  lr " + fmt("%.2e", lr) + "  |g| " + fmt("%.2f", res.grad_norm) + "  " +
             fmt("%.2f s/step", per_step) + "  eta " + fmt("%.0f s", per_step * static_cast<double>(stage.steps - step - 1)));
        window = 0;
        in_window = 0;
      }
      if ((step + 1) % r_.save_every == 0 && step + 1 < stage.steps) trainer->save_state(state, step + 1);
    }
    if (step < stage.steps) {  // interrupted or limited: keep the state for a later run
      if (step > first_step) trainer->save_state(state, step);
      log_(name + ": stopped at step " + std::to_string(step) + " of " + std::to_string(stage.steps) + "; run forge again to resume");
      stopped_ = true;
      return;
    }
    trainer->save_checkpoint(dir, DType::BF16, include);
    tokenizer_->save(dir / "tokenizer.json");
    extra["stage"] = name;
    extra["steps"] = stage.steps;
    extra["first_loss"] = std::isnan(first_loss) ? json(nullptr) : json(first_loss);
    extra["final_loss"] = std::isnan(final_loss) ? json(nullptr) : json(final_loss);
    extra["seconds"] = seconds_since(t0);
    write_text(dir / kDoneFile, extra.dump(2) + "\n");
    std::error_code ec;
    fs::remove(state, ec);
    log_(name + ": wrote " + dir.string() + fmt(" in %.0f s", seconds_since(t0)));
  }

  void esft_stage(int d, const fs::path& base, const fs::path& dir) {
    const std::string name = "esft-" + texts_[static_cast<std::size_t>(d)].name;
    auto trainer = from(base, r_.esft.stage.opt);
    // Relevance on the domain's training text under the base model (ESFT §3).
    RouterStats sum;
    for (std::int64_t b = 0; b < r_.esft.stats_batches; ++b) {
      const RouterStats s = trainer->router_stats(batch(stage_seed(name + "/stats"), b, d), r_.batch);
      if (sum.gate_score.empty()) sum = s;
      else
        for (std::size_t l = 0; l < s.gate_score.size(); ++l)
          for (std::size_t e = 0; e < s.gate_score[l].size(); ++e) {
            sum.gate_score[l][e] += s.gate_score[l][e];
            sum.token_ratio[l][e] += s.token_ratio[l][e];
          }
    }
    EsftAdapterConfig cfg;
    cfg.experts = select_esft_experts(sum, r_.esft.criterion, r_.esft.threshold);
    cfg.base_model = fs::relative(base, dir);  // "../base": the family folder can move as a whole
    std::string chosen;
    for (const auto& [l, ids] : cfg.experts) {
      chosen += " L" + std::to_string(l) + ":";
      for (auto e : ids) chosen += std::to_string(e) + ",";
      chosen.pop_back();
    }
    log_(name + ": " + std::to_string(cfg.expert_count()) + " experts reach " + r_.esft.criterion + " relevance " +
         fmt("%.2f", r_.esft.threshold) + " —" + chosen);
    auto listed = [&](const ExpectedTensor& t) {
      if (!t.is_expert()) return false;
      const auto it = cfg.experts.find(t.layer);
      return it != cfg.experts.end() && std::find(it->second.begin(), it->second.end(), t.expert) != it->second.end();
    };
    trainer->set_trainable(listed);
    json relevance = json::object();
    const auto& rel = r_.esft.criterion == "token" ? sum.token_ratio : sum.gate_score;
    for (std::size_t l = 0; l < rel.size(); ++l) {
      std::vector<double> row;
      for (double v : rel[l]) row.push_back(v / static_cast<double>(r_.esft.stats_batches));
      relevance[std::to_string(l)] = row;
    }
    train_stage(name, d, std::move(trainer), r_.esft.stage, dir, listed);
    if (fs::exists(dir / kDoneFile)) {
      write_expert_cfg(dir / kExpertCfgFile, cfg,
                       json{{"criterion", r_.esft.criterion}, {"threshold", r_.esft.threshold}, {"relevance", relevance},
                            {"domain", texts_[static_cast<std::size_t>(d)].name}}.dump());
      Checkpoint check(dir);  // the adapter must open over its base, or the stage is not done
      (void)check;
    }
  }

  // Held-out loss of every model on every domain, logged as a table and kept in forge.json.
  void evaluate() {
    std::vector<std::string> models{"base"};
    for (const DomainText& t : texts_) models.push_back(t.name);
    for (const DomainText& t : texts_) models.push_back("esft-" + t.name);
    json table = json::object();
    std::string header = "held-out perplexity  ";
    for (const DomainText& t : texts_) header += std::string(std::max<std::size_t>(1, 12 - t.name.size()), ' ') + t.name;
    log_(header);
    for (const std::string& m : models) {
      const auto trainer = from(r_.output / m, r_.base.opt);
      std::string line = m + std::string(std::max<std::size_t>(1, 21 - m.size()), ' ');
      for (std::size_t d = 0; d < texts_.size(); ++d) {
        const auto [tokens, rows] = eval_windows(d);
        const double ppl = rows ? std::exp(trainer->loss(tokens, rows)) : NAN;
        table[m][texts_[d].name] = ppl;
        line += fmt("%12.2f", ppl);
      }
      log_(line);
    }
    json summary = {{"recipe", json::parse(r_.text)}, {"heldout_perplexity", table}, {"machine", machine_description()},
                    {"finished", utc_timestamp()}, {"tokenizer_vocab", tokenizer_->vocab_size()}};
    for (const std::string& m : models) summary["stages"][m] = json::parse(read_text_file(r_.output / m / kDoneFile));
    write_text(r_.output / "forge.json", summary.dump(2) + "\n");
    log_("forge: wrote " + (r_.output / "forge.json").string());
  }

  const ForgeRecipe& r_;
  ForgeLog log_;
  ForgeOptions opt_;
  std::vector<DomainText> texts_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::vector<std::int32_t>> streams_, heldout_;
  bool stopped_ = false;
};

}  // namespace

void run_forge(const ForgeRecipe& recipe, const ForgeLog& log, const ForgeOptions& options) {
  Forge(recipe, log, options).run();
}

}  // namespace mosaic
