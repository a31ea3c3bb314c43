// The serving engine: requests from several threads all complete with the tokens the merged model
// generates, in submission order, with their stats; a queued request can be cancelled before it
// runs and a running one between tokens; bad requests are refused at submit.
#include <QTemporaryDir>
#include <QTest>

#include <atomic>
#include <future>
#include <thread>

#include "analysis/family_analysis.h"
#include "analysis/merge.h"
#include "common/error.h"
#include "runtime/engine.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestEngine : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  Family family_;
  std::unique_ptr<HostStore> store_;
  Layout layout_;
  std::vector<int> to_store_;

  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }
  static GenerationRequest request(std::int64_t max_new, std::uint64_t seed = 0) {
    return {.prompt = {165, 299, 204, 8, 63, 73}, .max_new_tokens = max_new,
            .sampling = {.temperature = seed ? 0.8 : 0.0, .seed = seed}};
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    for (const char* v : {"base", "ft1", "ft2", "ft3"}) family_.add(v, fixture("qwen2_moe", v));
    store_ = std::make_unique<HostStore>(family_);
    const auto a = analyze_family(family_);
    layout_ = make_layout(family_, a->sha256, plan_consolidation(a->distances, 9, Policy::RoundRobin));
    to_store_ = match_layout(layout_, family_, a->sha256, "layout");
  }

  void requestsFromSeveralThreads() {
    Runtime rt(*store_, layout_, to_store_);
    Engine engine(rt);
    const std::vector<std::string> targets{"ft1", "base", "ft3", "ft1", "ft2", "base"};
    std::vector<std::shared_ptr<RequestHandle>> handles(targets.size());
    std::vector<std::vector<std::int64_t>> streamed(targets.size());
    std::mutex m;
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < targets.size(); ++i)
      clients.emplace_back([&, i] {
        handles[i] = engine.submit({targets[i], request(8, i % 2 ? 5 + i : 0)}, [&, i](const RequestHandle&, std::int64_t token, const RuntimeCounters&) {
          std::lock_guard lock(m);
          streamed[i].push_back(token);
        });
      });
    for (auto& c : clients) c.join();

    std::vector<std::uint64_t> ids;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const RequestResult& r = handles[i]->wait();
      QCOMPARE(r.finish, Finish::Length);
      QCOMPARE(r.tokens.size(), std::size_t(8));
      {
        std::lock_guard lock(m);
        QCOMPARE(streamed[i], r.tokens);  // the stream saw every token, in order
      }
      // The tokens the consolidated-merge model of the target generates with the same sampling.
      const fs::path dir = scratch("merged-" + std::to_string(i));
      write_consolidated(family_, layout_, targets[i], dir);
      const auto merged = Model::load(Checkpoint(dir));
      QCOMPARE(r.tokens, generate(*merged, request(8, i % 2 ? 5 + i : 0)).tokens);
      const RequestStats& st = r.stats;
      QCOMPARE(st.prompt_tokens, std::int64_t(6));
      QCOMPARE(st.generated_tokens, std::int64_t(8));
      QVERIFY(st.queue_wait_seconds >= 0 && st.ttft_seconds > 0 && st.tpot_seconds > 0);
      QVERIFY(st.ttft_seconds >= st.queue_wait_seconds && st.total_seconds >= st.ttft_seconds);
      QVERIFY(st.counters.total().hits + st.counters.total().misses > 0);
      ids.push_back(handles[i]->id());
    }
    std::sort(ids.begin(), ids.end());
    QCOMPARE(std::unique(ids.begin(), ids.end()), ids.end());
  }

  void cancelQueuedAndRunning() {
    Runtime rt(*store_, layout_, to_store_);
    Engine engine(rt);
    // The first request holds the engine inside its first token until the others are queued.
    std::promise<void> entered, release;
    std::shared_future<void> released = release.get_future().share();
    auto running = engine.submit({"ft2", request(50)}, [&](const RequestHandle&, std::int64_t, const RuntimeCounters&) {
      if (released.wait_for(std::chrono::seconds(0)) != std::future_status::ready) entered.set_value();
      released.wait();
    });
    entered.get_future().wait();  // the engine is inside the first request's first token
    auto queued = engine.submit({"base", request(4)});
    auto later = engine.submit({"ft1", request(4)});
    queued->cancel();
    QCOMPARE(engine.queued(), std::size_t(2));
    int seen = 0;
    auto stopper = engine.submit({"ft3", request(40)}, [&](const RequestHandle& h, std::int64_t, const RuntimeCounters&) {
      if (++seen == 3) const_cast<RequestHandle&>(h).cancel();
    });
    running->cancel();
    release.set_value();

    QCOMPARE(running->wait().finish, Finish::Cancelled);
    QCOMPARE(running->wait().tokens.size(), std::size_t(1));  // stopped after the token in flight
    QCOMPARE(queued->wait().finish, Finish::Cancelled);
    QVERIFY(queued->wait().tokens.empty());
    QCOMPARE(queued->wait().stats.counters.swaps, std::int64_t(0));  // it never ran
    QCOMPARE(later->wait().finish, Finish::Length);
    QCOMPARE(stopper->wait().finish, Finish::Cancelled);
    QCOMPARE(stopper->wait().tokens.size(), std::size_t(3));
  }

  void badRequestsAreRefusedAtSubmit() {
    Runtime rt(*store_, layout_, to_store_);
    Engine engine(rt);
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"ft9", request(2)}); }), {"target 'ft9'"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1, 400}}}); }), {"token id 400"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {}}); }), {"prompt", "empty"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1}, .sampling = {.top_p = 2}}}); }), {"top_p"});
    QCOMPARE(engine.queued(), std::size_t(0));
  }

  void destroyingTheEngineCancelsWhatIsQueued() {
    Runtime rt(*store_, layout_, to_store_);
    std::shared_ptr<RequestHandle> a, b;
    {
      Engine engine(rt);
      a = engine.submit({"base", request(30)});
      b = engine.submit({"ft1", request(30)});
    }
    QVERIFY(a->finished() && b->finished());
    QCOMPARE(b->wait().finish, b->wait().tokens.empty() ? Finish::Cancelled : Finish::Length);
  }
};

QTEST_GUILESS_MAIN(TestEngine)
#include "tst_engine.moc"
