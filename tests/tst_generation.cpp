// Sampling and the generation loop: greedy, seeded sampling, top-k/top-p, stop ids and cancelling.
#include <QTest>

#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <mutex>
#include <set>
#include <thread>

#include "common/error.h"
#include "model/checkpoint.h"
#include "runtime/generation.h"
#include "runtime/sampler_reference.h"
#include "runtime/step_draws.h"
#include "runtime/threads.h"
#include "runtime/token_candidates.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
std::vector<std::int64_t> draw(SamplingParams p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.next(logits));
  return out;
}
const std::vector<float> kLogits{0.5f, 2.0f, 1.0f, 2.0f, -1.0f};  // two tied maxima at 1 and 3

}  // namespace

class TestGeneration : public QObject {
  Q_OBJECT
  std::unique_ptr<Model> model_;  // mixtral/ft1: greedy from the reference prompt gives 213, 209, 0, 0, …
  std::vector<std::int64_t> prompt_{165, 299, 204, 8, 63, 73, 11, 261, 79, 192, 208, 129};

 private Q_SLOTS:
  void initTestCase() {
    configure_threads();
    model_ = Model::load(Checkpoint(fixture("mixtral", "ft1")));
  }

  void greedyTakesTheFirstMaximum() {
    QCOMPARE(draw({}, kLogits, 3), (std::vector<std::int64_t>{1, 1, 1}));
  }

  void seededSamplingIsReproducible() {
    SamplingParams p{.temperature = 1.0, .seed = 42};
    const auto a = draw(p, kLogits, 64), b = draw(p, kLogits, 64);
    QCOMPARE(a, b);
    p.seed = 43;
    QVERIFY(draw(p, kLogits, 64) != a);
    QVERIFY(std::find(a.begin(), a.end(), 0) != a.end());  // not greedy: other tokens appear
  }

  void samplingFollowsTheSoftmax() {
    const std::vector<float> logits{0.0f, std::log(3.0f)};  // p = 1/4, 3/4
    const auto xs = draw({.temperature = 1.0, .seed = 7}, logits, 20000);
    const double ones = static_cast<double>(std::count(xs.begin(), xs.end(), 1)) / xs.size();
    QVERIFY2(std::abs(ones - 0.75) < 0.015, qPrintable(QString::number(ones)));
    // Temperature 0.5 squares the odds: p(1) = 9/10.
    const auto cold = draw({.temperature = 0.5, .seed = 7}, logits, 20000);
    const double c1 = static_cast<double>(std::count(cold.begin(), cold.end(), 1)) / cold.size();
    QVERIFY2(std::abs(c1 - 0.9) < 0.015, qPrintable(QString::number(c1)));
  }

  void greedyFindsTheMaximumAnywhereInTheRow() {
    // The maximum is searched in lanes of eight: put it in each lane, in the tail, and tie it.
    for (std::size_t size : {1, 7, 8, 9, 17, 32000})
      for (std::size_t at = 0; at < size; at += std::max<std::size_t>(1, size / 13)) {
        std::vector<float> row(size, -3.0f);
        row[at] = 5.0f;
        if (at + 9 < size) row[at + 9] = 5.0f;  // a later tie in another lane does not win
        QCOMPARE(Sampler({}).next(row), static_cast<std::int64_t>(at));
      }
  }

  void lazySortingDrawsWhatAFullSortDraws() {
    // Rows from peaked to flat, and with ties (logits rounded to quarters), so that prefixes reach past
    // the first sorted block; every draw must equal the full sort's.
    std::mt19937_64 gen(11);
    for (std::size_t vocab : {5, 300, 5000})
      for (double spread : {0.05, 1.0, 6.0}) {
        std::normal_distribution<float> normal(0.0f, static_cast<float>(spread));
        std::vector<float> row(vocab);
        for (float& l : row) l = std::round(normal(gen) * 4.0f) / 4.0f;
        row[0] = -0.0f;  // equal to +0: ties go to the lower index either way
        row[1] = 0.0f;
        row[vocab / 2] = -std::numeric_limits<float>::infinity();  // a banned token: never drawn
        for (double t : {0.3, 1.0, 2.0})
          for (double top_p : {1.0, 0.9, 0.5})
            for (std::int64_t top_k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3}, std::int64_t{100}, static_cast<std::int64_t>(vocab)}) {
              const SamplingParams p{.temperature = t, .top_p = top_p, .top_k = top_k, .seed = vocab + static_cast<std::uint64_t>(top_k)};
              Sampler lazy(p);
              FullSortSampler full(p);
              for (int i = 0; i < 20; ++i) {
                const std::int64_t token = lazy.next(row);
                QVERIFY(token != static_cast<std::int64_t>(vocab / 2));
                QVERIFY2(token == full.next(row), qPrintable(QString::asprintf("vocab %zu, spread %g, t %g, top_p %g, top_k %lld, draw %d", vocab,
                                                                                        spread, t, top_p, static_cast<long long>(top_k), i)));
              }
            }
      }
  }

  void candidatesAreTheMostProbableInOrder() {
    // Ties at the last place go to the lower indices; −0 equals +0; the keys give back index and logit.
    const std::vector<float> row{1.0f, 3.0f, -0.0f, 3.0f, 3.0f, 0.0f, 5.0f, 2.0f};
    const TokenCandidates c = prepare_candidates(row, 0.5, 3);
    QCOMPARE(c.vocab, std::int64_t{8});
    QCOMPARE(c.first_max, std::int64_t{6});
    QCOMPARE(c.max_logit, 5.0f);
    QCOMPARE(c.keys.size(), std::size_t{3});
    const std::int64_t want[] = {6, 1, 3};
    for (std::size_t i = 0; i < 3; ++i) {
      QCOMPARE(candidate_index(c.keys[i]), want[i]);
      QCOMPARE(candidate_logit(c.keys[i]), row[static_cast<std::size_t>(want[i])]);
    }
    double sum = 0;
    for (const float l : row) sum += std::exp((l - 5.0) / 0.5);
    QVERIFY(std::abs(c.normaliser - sum) < 1e-12 * sum);
    const TokenCandidates zeros = prepare_candidates(row, 1.0, 8);  // the two zeros last: −0 (index 2) first
    QCOMPARE(candidate_index(zeros.keys[6]), std::int64_t{2});
    QCOMPARE(candidate_index(zeros.keys[7]), std::int64_t{5});
    QCOMPARE(prepare_candidates(row, 1.0, 100).keys.size(), row.size());  // at most the vocabulary
    QVERIFY(prepare_candidates(row, 0.0, 100).keys.empty());             // greedy needs none
  }

  void preparedCandidatesDrawWhatTheRowDraws() {
    // A device prepares few candidates; the draw from them must take the row's token, fetching the
    // row only when it reaches past them (and then with the generator as the row's draw left it).
    std::mt19937_64 gen(13);
    int fetched = 0, draws = 0;
    for (std::size_t vocab : {5, 300, 5000})
      for (double spread : {0.05, 1.0, 6.0}) {
        std::normal_distribution<float> normal(0.0f, static_cast<float>(spread));
        std::vector<float> row(vocab);
        for (float& l : row) l = std::round(normal(gen) * 4.0f) / 4.0f;
        row[vocab / 2] = -std::numeric_limits<float>::infinity();
        for (int count : {4, 64})
          for (double t : {0.0, 0.3, 2.0})
            for (double top_p : {1.0, 0.9})
              for (std::int64_t top_k : {std::int64_t{0}, std::int64_t{3}, std::int64_t{100}}) {
                const SamplingParams p{.temperature = t, .top_p = top_p, .top_k = top_k, .seed = vocab + static_cast<std::uint64_t>(count)};
                Sampler from_row(p), from_candidates(p);
                TokenCandidates c = prepare_candidates(row, t, count);
                auto whole = std::move(c.row);
                c.row = [&] {
                  ++fetched;
                  return whole();
                };
                for (int i = 0; i < 20; ++i, ++draws) {
                  const std::int64_t token = from_candidates.next(c);
                  QVERIFY2(token == from_row.next(row), qPrintable(QString::asprintf("vocab %zu, spread %g, %d candidates, t %g, top_p %g, top_k %lld, draw %d",
                                                                                     vocab, spread, count, t, top_p, static_cast<long long>(top_k), i)));
                }
              }
      }
    // Flat rows outrun 4 candidates often, peaked ones seldom; most draws need no row (1565 of 6480
    // fetched it when this was written).
    QVERIFY2(fetched > 0 && fetched < draws / 2, qPrintable(QString::asprintf("%d of %d draws fetched the row", fetched, draws)));

    // Candidates prepared at another temperature cannot give the normaliser: the row is fetched.
    const std::vector<float> row{0.0f, 1.0f, 2.0f};
    TokenCandidates other = prepare_candidates(row, 1.0, 3);
    int calls = 0;
    other.row = [&] {
      ++calls;
      return row;
    };
    Sampler s({.temperature = 0.5, .seed = 3});
    s.next(other);
    QCOMPARE(calls, 1);
  }

  void threadedDrawsTakeTheTokensOfOneThread() {
    // A step's rows, each with its own sampler and settings; drawn on four threads and on one, from
    // fresh samplers of the same seeds, round after round (the samplers' states must follow their rows).
    std::mt19937_64 gen(5);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    constexpr int kRows = 12;
    std::vector<std::vector<float>> rows(kRows, std::vector<float>(4000));
    for (auto& row : rows)
      for (float& l : row) l = normal(gen);
    auto samplers = [] {
      std::vector<std::unique_ptr<Sampler>> out;
      for (int r = 0; r < kRows; ++r)
        out.push_back(std::make_unique<Sampler>(SamplingParams{.temperature = 0.5 + 0.1 * r, .top_p = r % 3 ? 0.9 : 1.0,
                                                               .top_k = r % 4 ? 0 : 50, .seed = static_cast<std::uint64_t>(r)}));
      return out;
    };
    auto rounds = [&](unsigned threads, std::size_t threaded_from) {
      const auto s = samplers();
      std::vector<std::int64_t> tokens;
      for (int round = 0; round < 8; ++round) {
        std::vector<TokenDraw> draws;
        for (int r = 0; r < kRows; ++r) draws.push_back({s[static_cast<std::size_t>(r)].get(), rows[static_cast<std::size_t>((r + round) % kRows)]});
        draw_tokens(draws, threads, threaded_from);
        for (const TokenDraw& d : draws) tokens.push_back(d.token);
      }
      return tokens;
    };
    const auto one = rounds(1, SIZE_MAX), four = rounds(4, 0);
    QCOMPARE(four, one);
    QVERIFY(std::none_of(one.begin(), one.end(), [](std::int64_t t) { return t < 0; }));
    QVERIFY(std::set<std::int64_t>(one.begin(), one.end()).size() > 10);  // not greedy: the draws vary
  }

  void candidateDrawsPastTheirKeysFetchRowsOnThreads() {
    // A step of prepared draws: flat rows, whose draws reach past their 16 candidates and fetch the
    // row, and peaked rows, whose draws stay within them. The fetches (a device copy each, 5 ms here)
    // go to the threads; the tokens are those of the whole rows.
    constexpr int kRows = 16, kVocab = 4000;
    std::mt19937_64 gen(11);
    std::uniform_real_distribution<float> noise(0.0f, 0.01f);
    std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
    for (int r = 0; r < kRows; ++r) {
      for (float& l : rows[static_cast<std::size_t>(r)]) l = noise(gen);
      if (r % 2) rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(r * 7)] = 30.0f;  // peaked: this token almost surely
    }
    std::mutex m;
    std::set<std::thread::id> fetchers;
    std::vector<int> fetched(kRows, 0);
    std::vector<TokenCandidates> prepared;
    for (int r = 0; r < kRows; ++r) {
      TokenCandidates c = prepare_candidates(rows[static_cast<std::size_t>(r)], 1.0, 16);
      c.row = [&, r, whole = std::move(c.row)] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const std::lock_guard lock(m);
        fetchers.insert(std::this_thread::get_id());
        ++fetched[static_cast<std::size_t>(r)];
        return whole();
      };
      prepared.push_back(std::move(c));
    }
    auto draw = [&](bool from_candidates) {
      std::vector<std::unique_ptr<Sampler>> samplers;
      std::vector<TokenDraw> draws;
      for (int r = 0; r < kRows; ++r) {
        samplers.push_back(std::make_unique<Sampler>(SamplingParams{.temperature = 1.0, .seed = static_cast<std::uint64_t>(r)}));
        if (from_candidates) draws.push_back({samplers.back().get(), {}, &prepared[static_cast<std::size_t>(r)]});
        else draws.push_back({samplers.back().get(), rows[static_cast<std::size_t>(r)]});
      }
      draw_tokens(draws, 4, 0);
      std::vector<std::int64_t> tokens;
      for (const TokenDraw& d : draws) tokens.push_back(d.token);
      return tokens;
    };
    QCOMPARE(draw(true), draw(false));
    for (int r = 0; r < kRows; ++r) QCOMPARE(fetched[static_cast<std::size_t>(r)], r % 2 ? 0 : 1);
    QVERIFY2(fetchers.size() > 1, "the rows were fetched on one thread");
  }

  void topKAndTopPNarrowTheChoice() {
    // top-k 2 keeps the two tied maxima only.
    for (auto t : draw({.temperature = 5.0, .top_k = 2, .seed = 1}, kLogits, 200)) QVERIFY(t == 1 || t == 3);
    // A tiny nucleus keeps only the most probable token (the first of a tie).
    for (auto t : draw({.temperature = 1.0, .top_p = 0.01, .seed = 1}, kLogits, 50)) QCOMPARE(t, std::int64_t(1));
    expect_mentions(error_of<InvalidArgument>([] { Sampler s({.top_p = 0.0}); }), {"top_p"});
    expect_mentions(error_of<InvalidArgument>([] { Sampler s({.top_k = -1}); }), {"top_k"});
  }

  void stopIdEndsGeneration() {
    GenerationRequest req{.prompt = prompt_, .max_new_tokens = 10, .stop_ids = {209}};
    const auto r = generate(*model_, req);
    QCOMPARE(r.tokens, (std::vector<std::int64_t>{213, 209}));
    QCOMPARE(r.finish, Finish::Stop);
  }

  void callbackStreamsAndCancels() {
    std::vector<std::pair<std::int64_t, std::int64_t>> seen;
    GenerationRequest req{.prompt = prompt_, .max_new_tokens = 10};
    const auto r = generate(*model_, req, [&](std::int64_t token, std::int64_t index) {
      seen.emplace_back(token, index);
      return index < 2;  // cancel after the third token
    });
    QCOMPARE(r.finish, Finish::Cancelled);
    QCOMPARE(r.tokens, (std::vector<std::int64_t>{213, 209, 0}));
    QCOMPARE(seen, (std::vector<std::pair<std::int64_t, std::int64_t>>{{213, 0}, {209, 1}, {0, 2}}));
  }

  void lengthsAndBadRequests() {
    GenerationRequest req{.prompt = prompt_, .max_new_tokens = 0};
    QVERIFY(generate(*model_, req).tokens.empty());
    req.max_new_tokens = 4;
    const auto r = generate(*model_, req);
    QCOMPARE(r.tokens.size(), std::size_t(4));
    QCOMPARE(r.finish, Finish::Length);
    QVERIFY(r.prefill_seconds > 0 && r.decode_seconds > 0);
    // A prompt longer than the context is named as the prompt (once reported as max_new_tokens).
    const std::int64_t context = model_->spec().max_position_embeddings;
    req.prompt.assign(static_cast<std::size_t>(context + 1), 5);
    expect_mentions(error_of<InvalidArgument>([&] { generate(*model_, req); }), {"prompt", "longer than the model's context"});
    req.prompt.assign(static_cast<std::size_t>(context - 2), 5);
    expect_mentions(error_of<InvalidArgument>([&] { generate(*model_, req); }), {"max_new_tokens", "ask for at most 2"});
    req.prompt.clear();
    expect_mentions(error_of<InvalidArgument>([&] { generate(*model_, req); }), {"prompt", "empty"});
  }
};

QTEST_GUILESS_MAIN(TestGeneration)
#include "tst_generation.moc"
