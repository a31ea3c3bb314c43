// The serving engine: requests from several threads all complete with the tokens the merged model
// generates, streamed in order, with their stats; a waiting request can be cancelled before it runs
// and a running one between tokens, its KV blocks freed at once; bad requests are refused at
// submit; the variant-switching policies trade swaps for waiting as specified; a virtual clock
// replays arrivals without sleeping; the runtime can be replaced while requests are in flight.
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include <future>
#include <thread>

#include "analysis/family_analysis.h"
#include "analysis/layout.h"
#include "analysis/merge.h"
#include "common/error.h"
#include "runtime/device_plan.h"
#include "runtime/engine.h"
#include "runtime/forward.h"
#include "runtime/reconfigurer.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestEngine : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  Family family_;
  std::unique_ptr<HostStore> store_;
  Layout layout_;
  std::vector<PinnedExpert> pinned_;

  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }
  static GenerationRequest request(std::int64_t max_new, std::uint64_t seed = 0) {
    return {.prompt = {165, 299, 204, 8, 63, 73}, .max_new_tokens = max_new,
            .sampling = {.temperature = seed ? 0.8 : 0.0, .seed = seed}};
  }
  std::shared_ptr<Runtime> runtime(RuntimeConfig c = {}) {
    c.pinned = pinned_;
    return std::make_shared<Runtime>(*store_, std::move(c));
  }
  // Submits `r` and returns once its first token is out: the request is running.
  static std::shared_ptr<RequestHandle> submit_running(Engine& engine, ServeRequest r) {
    auto started = std::make_shared<std::promise<void>>();
    auto once = std::make_shared<std::atomic<bool>>(false);
    RequestCallbacks cb;
    cb.on_token = [started, once](const RequestHandle&, std::int64_t, const RuntimeCounters&) {
      if (!once->exchange(true)) started->set_value();
    };
    std::future<void> first = started->get_future();
    auto handle = engine.submit(std::move(r), cb);
    first.wait();
    return handle;
  }
  // {base, ft1, ft2} and {base, ft1, ft3}, each with the layout consolidation plans at 9 a layer.
  struct FamilyChange {
    std::shared_ptr<Family> before_family, after_family;
    std::shared_ptr<HostStore> before, after;
    std::vector<PinnedExpert> before_pins, after_pins;
  };
  static std::vector<PinnedExpert> planned(const Family& f) {
    const auto a = analyze_family(f);
    const Layout l = make_layout(f, a->sha256, plan_consolidation(a->distances, 9, Policy::RoundRobin));
    return pinned_from_layout(l, match_layout(l, f, a->sha256, "layout"));
  }
  static FamilyChange family_change() {
    FamilyChange c;
    c.before_family = std::make_shared<Family>();
    c.after_family = std::make_shared<Family>();
    for (const char* v : {"base", "ft1", "ft2"}) c.before_family->add(v, fixture("qwen2_moe", v));
    for (const char* v : {"base", "ft1", "ft3"}) c.after_family->add(v, fixture("qwen2_moe", v));
    c.before = std::make_shared<HostStore>(*c.before_family);
    c.after = std::make_shared<HostStore>(*c.after_family);
    c.before_pins = planned(*c.before_family);
    c.after_pins = planned(*c.after_family);
    return c;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    for (const char* v : {"base", "ft1", "ft2", "ft3"}) family_.add(v, fixture("qwen2_moe", v));
    store_ = std::make_unique<HostStore>(family_);
    const auto a = analyze_family(family_);
    layout_ = make_layout(family_, a->sha256, plan_consolidation(a->distances, 9, Policy::RoundRobin));
    pinned_ = pinned_from_layout(layout_, match_layout(layout_, family_, a->sha256, "layout"));
  }

  void requestsFromSeveralThreads() {
    Engine engine(runtime({.resident_sets = 4}));
    const std::vector<std::string> targets{"ft1", "base", "ft3", "ft1", "ft2", "base"};
    std::vector<std::shared_ptr<RequestHandle>> handles(targets.size());
    std::vector<std::vector<std::int64_t>> streamed(targets.size());
    std::mutex m;
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < targets.size(); ++i)
      clients.emplace_back([&, i] {
        RequestCallbacks cb;
        cb.on_token = [&, i](const RequestHandle&, std::int64_t token, const RuntimeCounters&) {
          std::lock_guard lock(m);
          streamed[i].push_back(token);
        };
        handles[i] = engine.submit({targets[i], request(8, i % 2 ? 5 + i : 0)}, cb);
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
      QVERIFY(st.queue_wait() >= 0 && st.ttft() > 0 && st.tpot() > 0);
      QVERIFY(st.ttft() >= st.queue_wait() && st.turnaround() >= st.ttft());
      QVERIFY(st.counters.total().hits + st.counters.total().misses > 0);
      ids.push_back(handles[i]->id());
    }
    std::sort(ids.begin(), ids.end());
    QCOMPARE(std::unique(ids.begin(), ids.end()), ids.end());
    QVERIFY(engine.stats().largest_step_sequences > 1);  // they ran together
  }

  // The CUDA backend returns the rows it draws from as candidates (the most probable tokens, the
  // normaliser); the runtime prepares them the same way on the host here, so this runs the engine's
  // path for them: the same tokens as from whole rows, greedy and sampled, with few candidates (many
  // draws then fetch the row) and with many.
  void preparedDrawsTakeTheTokensOfWholeRows() {
    const std::vector<std::pair<std::string, SamplingParams>> requests{
        {"ft1", {}},
        {"base", {.temperature = 0.8, .seed = 3}},
        {"ft2", {.temperature = 1.3, .top_p = 0.9, .seed = 4}},
        {"ft3", {.temperature = 0.5, .top_k = 5, .seed = 5}},
        {"ft1", {.temperature = 2.0, .top_k = 40, .seed = 6}}};
    auto tokens = [&](int candidates) {
      Engine engine(runtime({.resident_sets = 4, .host_candidates = candidates}));
      std::vector<std::shared_ptr<RequestHandle>> handles;
      for (const auto& [target, sampling] : requests) {
        GenerationRequest g = request(10);
        g.sampling = sampling;
        handles.push_back(engine.submit({target, g}));
      }
      std::vector<std::vector<std::int64_t>> out;
      for (const auto& h : handles) out.push_back(h->wait().tokens);
      return out;
    };
    const auto whole = tokens(0);
    for (const auto& t : whole) QCOMPARE(t.size(), std::size_t(10));
    QCOMPARE(tokens(8), whole);
    QCOMPARE(tokens(1024), whole);
  }

  // Asked for, each step reports where every one of the request's tokens was routed: k choices per
  // MoE layer and token, hits and misses adding up to the counters, every hit served by the copy the
  // layout keeps resident (another variant's where it consolidated ft1's away) and every miss by
  // ft1's own expert, loaded on demand.
  void routesAreTracedOnRequest() {
    // Without look-ahead swaps: with them a request whose set is not in waits while another decodes
    // alone, and the two requests below are to run together.
    Engine engine(runtime({.resident_sets = 4}), {.scheduler = {.swap_ahead = false}});
    struct Step {
      std::int64_t position;
      std::vector<RoutedExpert> routes;
    };
    std::vector<Step> steps;
    RequestCallbacks cb;
    cb.on_routes = [&](const RequestHandle&, std::int64_t position, const std::vector<RoutedExpert>& routes) {
      steps.push_back({position, routes});
    };
    const auto handle = engine.submit({"ft1", request(4)}, cb);
    const RequestResult& r = handle->wait();
    QCOMPARE(r.tokens.size(), std::size_t(4));
    QCOMPARE(steps.size(), std::size_t(4));  // the prompt's prefill, then each fed-back token but the last
    QCOMPARE(steps[0].position, std::int64_t(0));
    QCOMPARE(steps[3].position, std::int64_t(6 + 2));
    const int ft1 = store_->index("ft1");
    const std::int64_t k = store_->spec().top_k;
    std::int64_t hits = 0, misses = 0, foreign = 0;
    std::map<std::tuple<std::int64_t, int>, int> per_token_layer;
    for (const Step& st : steps)
      for (const RoutedExpert& e : st.routes) {
        ++per_token_layer[{st.position + e.token, e.layer}];
        QVERIFY(e.expert >= 0 && e.expert < store_->spec().num_experts);
        if (e.outcome == RoutedExpert::Outcome::Hit) {
          ++hits;
          QVERIFY(e.served_by >= 0 && e.served_by < store_->targets());
          QCOMPARE(e.served_expert, e.expert);  // consolidation keeps each position: some variant's copy of expert e
          foreign += e.served_by != ft1 ? 1 : 0;
        } else if (e.outcome == RoutedExpert::Outcome::Miss) {
          ++misses;
          QCOMPARE(int(e.served_by), ft1);
          QCOMPARE(e.served_expert, e.expert);
        }
      }
    QCOMPARE(hits, r.stats.counters.total().hits);
    QCOMPARE(misses, r.stats.counters.total().misses);
    QVERIFY2(foreign > 0, "the consolidated layout serves some of ft1's choices with another variant's copy");
    QCOMPARE(per_token_layer.size() % 9, std::size_t(0));  // 6 prompt + 3 fed-back positions, each in every MoE layer
    for (const auto& [key, n] : per_token_layer) QCOMPARE(n, static_cast<int>(k));
    // Its three decode steps ran one token alone: each MoE layer timed them, filed by the hits among
    // the token's top-k that the routes show (Multi-MoE's Table 1).
    std::map<std::pair<std::size_t, std::size_t>, std::int64_t> alone_steps;  // (layer, hits) → steps
    for (std::size_t i = 1; i < steps.size(); ++i) {
      std::map<std::size_t, std::size_t> hits_in;  // layer → hits
      for (const RoutedExpert& e : steps[i].routes) hits_in[static_cast<std::size_t>(e.layer)] += e.outcome == RoutedExpert::Outcome::Hit;
      for (const auto& [layer, h] : hits_in) ++alone_steps[{layer, h}];
    }
    std::int64_t timed = 0;
    for (std::size_t l = 0; l < r.stats.counters.layers.size(); ++l) {
      const auto& alone = r.stats.counters.layers[l].alone;
      for (std::size_t h = 0; h < alone.size(); ++h) {
        const auto want = alone_steps.find({l, h});
        QCOMPARE(alone[h].steps, want == alone_steps.end() ? std::int64_t(0) : want->second);
        if (alone[h].steps > 0) QVERIFY(alone[h].attention_seconds > 0 && alone[h].expert_seconds > 0);
        timed += alone[h].steps;
      }
    }
    QCOMPARE(timed, static_cast<std::int64_t>(3 * per_token_layer.size() / 9));
    // Steps that batch several tokens time nothing: two requests prefilled and decoded together.
    for (const auto& h : engine.submit_all({{"ft1", request(3)}, {"base", request(3)}}))
      for (const LayerCounts& c : h->wait().stats.counters.layers) QVERIFY(c.alone.empty());
    // Without the callback nothing is traced (and nothing is slower for it).
    QCOMPARE(engine.submit({"ft1", request(2)}, {})->wait().tokens.size(), std::size_t(2));
  }

  void cancelWaitingAndRunning() {
    auto rt = runtime();
    Engine engine(rt, {.scheduler = {.max_sequences = 1}});  // one at a time: the others wait
    // The first request holds the engine inside its first token until the others are queued.
    std::promise<void> entered, release;
    std::shared_future<void> released = release.get_future().share();
    RequestCallbacks hold;
    hold.on_token = [&](const RequestHandle&, std::int64_t, const RuntimeCounters&) {
      if (released.wait_for(std::chrono::seconds(0)) != std::future_status::ready) entered.set_value();
      released.wait();
    };
    auto running = engine.submit({"ft2", request(50)}, hold);
    entered.get_future().wait();
    auto queued = engine.submit({"base", request(4)});
    auto later = engine.submit({"ft1", request(4)});
    queued->cancel();
    QCOMPARE(engine.queued(), std::size_t(2));
    int seen = 0;
    RequestCallbacks self_cancel;
    self_cancel.on_token = [&](const RequestHandle& h, std::int64_t, const RuntimeCounters&) {
      if (++seen == 3) const_cast<RequestHandle&>(h).cancel();
    };
    auto stopper = engine.submit({"ft3", request(40)}, self_cancel);
    QVERIFY(rt->kv_blocks().used() > 0);
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
    QCOMPARE(rt->kv_blocks().used(), std::int64_t(0));
  }

  void cancellingFreesBlocksAtOnce() {
    auto rt = runtime();
    Engine engine(rt);
    auto h = submit_running(engine, {"ft1", {.prompt = std::vector<std::int64_t>(40, 7), .max_new_tokens = 200}});
    QVERIFY(rt->kv_blocks().used() >= 3);  // 40+ tokens in blocks of 16
    h->cancel();
    QCOMPARE(h->wait().finish, Finish::Cancelled);
    QCOMPARE(rt->kv_blocks().used(), std::int64_t(0));
    QVERIFY(h->wait().tokens.size() < 200);
  }

  // A request cancelled before it arrives ends at once, not at its arrival, and is forgotten: the
  // requests around it, arriving before and after, are served.
  void cancelledBeforeItArrives() {
    Engine engine(runtime());
    const double now = engine.now();
    auto handles = engine.submit_all({{"base", request(2), false, now + 2}, {"ft1", request(2), false, now + 1000}, {"ft1", request(2), false, now + 3}});
    handles[1]->cancel();
    QVERIFY(handles[1]->wait_for(std::chrono::seconds(30)));
    QCOMPARE(handles[1]->wait().finish, Finish::Cancelled);
    QVERIFY(handles[1]->wait().tokens.empty());
    for (std::size_t i : {0, 2}) {
      QVERIFY(handles[i]->wait_for(std::chrono::seconds(60)));
      QCOMPARE(handles[i]->wait().tokens.size(), std::size_t(2));
    }
    QCOMPARE(engine.queued(), std::size_t(0));
  }

  void badRequestsAreRefusedAtSubmit() {
    Engine engine(runtime());
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"ft9", request(2)}); }), {"target 'ft9'"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1, 400}}}); }), {"token id 400"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1, -3}}}); }), {"token id -3"});
    // The context bounds what is asked for (a probe's hang: 10^8 new tokens ran against 256 positions).
    const std::int64_t context = store_->spec().max_position_embeddings;
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1, 2, 3}, .max_new_tokens = 100000000}}); }),
                    {"max_new_tokens", "context of " + std::to_string(context), "at most " + std::to_string(context - 3)});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = std::vector<std::int64_t>(static_cast<std::size_t>(context) + 1, 1)}}); }),
                    {"prompt", "longer than the model's context"});
    QCOMPARE(engine.submit({"base", {.prompt = {1, 2, 3}, .max_new_tokens = context - 3}})->wait().finish, Finish::Length);  // exactly fits
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {}}); }), {"prompt", "empty"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1}, .sampling = {.top_p = 2}}}); }), {"top_p"});
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit({"base", {.prompt = {1}, .max_new_tokens = 3}, true}); }),
                    {"logits request"});
    // One bad request in a batch refuses the batch: nothing was submitted.
    expect_mentions(error_of<InvalidArgument>([&] { engine.submit_all({{"base", request(2)}, {"nobody", request(2)}}); }),
                    {"target 'nobody'"});
    QCOMPARE(engine.queued(), std::size_t(0));
  }

  void destroyingTheEngineCancelsWhatIsUnfinished() {
    auto rt = runtime();
    std::shared_ptr<RequestHandle> a, b;
    {
      Engine engine(rt, {.scheduler = {.max_sequences = 1}});
      a = engine.submit({"base", request(30)});
      b = engine.submit({"ft1", request(30)});
    }
    QVERIFY(a->finished() && b->finished());
    QCOMPARE(b->wait().finish, b->wait().tokens.size() == 30 ? Finish::Length : Finish::Cancelled);
    QCOMPARE(rt->kv_blocks().used(), std::int64_t(0));
  }

  void switchingPolicies() {
    // One non-expert set resident (K = 1), requests alternating between two variants, all at once.
    // FCFS serves them in arrival order, so it switches at every change of variant; affinity
    // serves each set's requests together and switches once.
    std::vector<ServeRequest> burst;
    for (int i = 0; i < 8; ++i) burst.push_back({i % 2 ? "ft1" : "ft2", request(3), false, 0.0});
    auto swaps = [&](SwitchPolicy p) -> std::int64_t {
      Engine engine(runtime(), {.scheduler = {.max_sequences = 2, .switching = p, .max_wait_seconds = 1e6}, .clock = make_virtual_clock()});
      std::int64_t total = 0;
      for (const auto& h : engine.submit_all(burst)) total += h->wait().stats.counters.swaps;
      return engine.stats().swaps == total ? total : -1;  // the engine's count is the requests' sum
    };
    const std::int64_t fcfs = swaps(SwitchPolicy::Fcfs), affinity = swaps(SwitchPolicy::Affinity);
    QVERIFY2(fcfs >= 7, qPrintable(QString::number(fcfs)));
    QCOMPARE(affinity, std::int64_t(2));  // ft2 first (the oldest), then ft1
    // With a bound of 0 s on waiting, affinity degenerates to FCFS.
    Engine strict(runtime(), {.scheduler = {.max_sequences = 2, .switching = SwitchPolicy::Affinity, .max_wait_seconds = 0},
                              .clock = make_virtual_clock()});
    std::int64_t bounded = 0;
    for (const auto& h : strict.submit_all(burst)) bounded += h->wait().stats.counters.swaps;
    QVERIFY(bounded > affinity);
  }

  void affinityChoosesTheSetWithTheMostQueuedWork() {
    // One set buffer, set 0 resident and running. Waiting: one old request of set 1 (8 tokens to
    // run) and three newer ones of set 2 (24): once set 0's work is done, set 2 goes first, though
    // set 1's request is older; past the fairness bound the oldest goes first whatever the work.
    // `newer_total`: each set-2 request's tokens (4 of them its prompt).
    auto plan_after = [](double now, double max_wait, double newer_arrival, std::int64_t newer_total) {
      KvBlockPool blocks(16, std::nullopt);
      Scheduler s({.max_sequences = 8, .switching = SwitchPolicy::Affinity, .max_wait_seconds = max_wait, .swap_ahead = false}, blocks, 1);
      std::vector<SequenceState> q{{.order = 0, .arrival = 0.0, .set = 1, .known = 4, .total = 8}};
      for (std::uint64_t i = 1; i <= 3; ++i)
        q.push_back({.order = i, .arrival = newer_arrival, .set = 2, .known = 4, .total = newer_total});
      for (SequenceState& x : q) s.add(&x);
      std::vector<int> sets;
      for (const SequenceState* x : s.plan(now).admitted) sets.push_back(x->set);
      return sets;
    };
    // 24 tokens × (1 + 0.5/10) against 8 × (1 + 1/10): the most work first, though not the oldest.
    QCOMPARE(plan_after(1.0, 10.0, 0.5, 8), (std::vector<int>{2, 2, 2}));
    // Set 1's request has waited past the bound: the oldest first.
    QCOMPARE(plan_after(11.0, 10.0, 0.5, 8), std::vector<int>{1});
    {  // and its set's newer requests with it, where arrival order would have run it alone
      KvBlockPool blocks(16, std::nullopt);
      Scheduler s({.max_sequences = 8, .switching = SwitchPolicy::Affinity, .max_wait_seconds = 10, .swap_ahead = false}, blocks, 1);
      std::vector<SequenceState> q{{.order = 0, .arrival = 0.0, .set = 1, .known = 4, .total = 8},
                                   {.order = 1, .arrival = 0.5, .set = 2, .known = 4, .total = 8},
                                   {.order = 2, .arrival = 0.6, .set = 1, .known = 4, .total = 8}};
      for (SequenceState& x : q) s.add(&x);
      QCOMPARE(s.plan(11.0).admitted, (std::vector<SequenceState*>{&q[0], &q[2]}));
    }
    // Within the bound the wait weighs the work: 8 × (1 + 9/10) = 15.2 against 3 × 8 × (1 + 0.1/10) =
    // 24.2, and against 3 × 5 × 1.01 = 15.15 when the newer requests are shorter.
    QCOMPARE(plan_after(9.0, 10.0, 8.9, 8), (std::vector<int>{2, 2, 2}));
    QCOMPARE(plan_after(9.0, 10.0, 8.9, 5), std::vector<int>{1});
  }

  void oneBufferTakesTurnsInTheOrderSetsWaited() {
    // One set buffer, no look-ahead (K = 1). Set 0's turn begins at t = 1 with three requests that
    // waited for it; the token budget (8) lets two prompts (4 tokens each) in a step. Set 2's light
    // request (waiting since 1.02) and set 1's heavy ones (since 1.05) outweigh what set 0 has left,
    // but set 0 first runs the request that waited for its turn (else it would wait a whole round of
    // the others' turns); then it drains: a request of set 0 that came during its turn does not join.
    // Then set 2 comes in, the set that waited longest, not set 1, the heaviest: the sets take turns
    // in order, and none waits for the bound (10 s) to get one.
    KvBlockPool blocks(16, std::nullopt);
    Scheduler s({.max_batch_tokens = 8, .max_sequences = 8, .switching = SwitchPolicy::Affinity, .max_wait_seconds = 10, .swap_ahead = false},
                blocks, 1);
    std::vector<SequenceState> q;
    for (std::uint64_t i = 0; i < 3; ++i) q.push_back({.order = i, .arrival = 0.5, .set = 0, .known = 4, .total = 8});
    q.push_back({.order = 3, .arrival = 1.02, .set = 2, .known = 4, .total = 16});
    for (std::uint64_t i = 4; i < 8; ++i) q.push_back({.order = i, .arrival = 1.05, .set = 1, .known = 4, .total = 40});
    q.push_back({.order = 8, .arrival = 1.15, .set = 0, .known = 4, .total = 8});
    const auto arrive = [&](double now) {
      for (SequenceState& x : q)
        if (x.arrival > now - 0.1 && x.arrival <= now) s.add(&x);
    };
    const auto run = [](const StepPlan& p) {  // the step: its chunks computed, a token generated where a chunk ends
      for (const StepPlan::Chunk& c : p.chunks)
        if ((c.sequence->computed += c.tokens) == c.sequence->known) ++c.sequence->known;
    };
    const std::vector<int> set0{0};
    arrive(0.5);
    StepPlan p = s.plan(1.0, set0);
    QCOMPARE(p.admitted, (std::vector<SequenceState*>{&q[0], &q[1]}));
    run(p);
    arrive(1.1);
    p = s.plan(1.1, set0);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&q[2]});  // it waited for this turn
    run(p);
    arrive(1.2);
    p = s.plan(1.2, set0);
    QVERIFY(p.admitted.empty());  // set 0 drains: q[8] came during its turn
    QCOMPARE(p.chunks.size(), std::size_t(3));
    for (int i = 0; i < 3; ++i) s.remove(&q[static_cast<std::size_t>(i)]);  // done
    p = s.plan(1.3, set0);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&q[3]});
    QCOMPARE(p.sets, std::vector<int>{2});
  }

  void residentSetsAutoAndLookAheadByDefault() {
    // resident_sets auto holds every set the targets use (4 here, no budget); the engine then fills
    // sets ahead without being asked, so a burst over four variants swaps ahead, with the outputs of
    // one set at a time (K = 1, arrival order, as the paper runs it).
    const auto rt = runtime({.resident_sets = RuntimeConfig::kAutoSets});
    QCOMPARE(rt->resident_capacity(), store_->sets());
    QVERIFY(store_->sets() >= 4);
    std::vector<ServeRequest> burst;
    for (int i = 0; i < 8; ++i) burst.push_back({i % 4 == 0 ? "base" : i % 4 == 1 ? "ft1" : i % 4 == 2 ? "ft2" : "ft3", request(6), false, 0.0});
    std::vector<std::vector<std::int64_t>> paper, now;
    {
      Engine engine(runtime(), {.scheduler = {.switching = SwitchPolicy::Fcfs}});
      for (const auto& h : engine.submit_all(burst)) paper.push_back(h->wait().tokens);
    }
    Engine engine(rt);
    for (const auto& h : engine.submit_all(burst)) now.push_back(h->wait().tokens);
    QCOMPARE(now, paper);
    QVERIFY2(engine.stats().swaps_ahead >= 1, qPrintable(QString::number(engine.stats().swaps_ahead)));
  }

  void theSchedulerLoadsSetsAheadRatherThanStall() {
    // Look-ahead swaps: while a batch runs, a request whose set is not in (or still being filled)
    // waits and names its set for filling; once the set is in it joins; with nothing running it
    // starts at once, its swap then stalling nobody.
    KvBlockPool blocks(16, std::nullopt);
    Scheduler s({.switching = SwitchPolicy::Affinity, .swap_ahead = true}, blocks, 2);
    SequenceState a{.order = 0, .set = 0, .known = 4, .total = 8}, b{.order = 1, .arrival = 1, .set = 1, .known = 4, .total = 8};
    s.add(&a);
    StepPlan p = s.plan(0);
    QCOMPARE(p.admitted.size(), std::size_t(1));  // nothing ran: a starts, its set swapped in for the step
    QVERIFY(p.upcoming.empty());
    s.add(&b);
    const std::vector<int> resident0{0, -1}, both{0, 1}, one{1};
    p = s.plan(2, resident0);
    QVERIFY(p.admitted.empty());
    QCOMPARE(p.upcoming, std::vector<int>{1});
    QCOMPARE(p.sets, std::vector<int>{0});
    p = s.plan(3, both, one);  // set 1 resident but still filling
    QVERIFY(p.admitted.empty());
    QCOMPARE(p.upcoming, std::vector<int>{1});
    p = s.plan(4, both);  // filled
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&b});
    QVERIFY(p.upcoming.empty());
    QCOMPARE(p.sets, (std::vector<int>{0, 1}));
    // One request at a time: the next one's set is filled while the running one decodes.
    KvBlockPool blocks1(16, std::nullopt);
    Scheduler one_at_a_time({.max_sequences = 1, .swap_ahead = true}, blocks1, 2);
    SequenceState e{.order = 0, .set = 0, .known = 4, .total = 8}, g{.order = 1, .set = 1, .known = 4, .total = 8};
    one_at_a_time.add(&e);
    one_at_a_time.add(&g);
    p = one_at_a_time.plan(0);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&e});
    QCOMPARE(p.upcoming, std::vector<int>{1});
    // The runtime's buffers: a fill ahead never takes a buffer the step uses or one holding a set
    // wanted sooner (else two waiting sets would evict each other's fills step after step).
    Reconfigurer buffers(3);
    const std::vector<int> step{0};
    buffers.ensure(step);
    const int b1 = buffers.ahead(1);
    QVERIFY(b1 > 0);
    buffers.ensure(step);
    const std::vector<int> sooner{1};
    const int b2 = buffers.ahead(2, sooner);
    QVERIFY(b2 > 0 && b2 != b1);
    buffers.ensure(step);
    const std::vector<int> both_sooner{1, 2};
    QCOMPARE(buffers.ahead(3, both_sooner), -1);
    QCOMPARE(buffers.ahead(2), -1);  // resident already
    QVERIFY(buffers.ahead(3, sooner) == b2);  // set 2 no longer wanted sooner: its buffer goes
    // Without look-ahead the same request joins at once, its swap in the running batch's step.
    KvBlockPool blocks2(16, std::nullopt);
    Scheduler plain({.switching = SwitchPolicy::Affinity}, blocks2, 2);
    SequenceState c{.order = 0, .set = 0, .known = 4, .total = 8}, d{.order = 1, .arrival = 1, .set = 1, .known = 4, .total = 8};
    plain.add(&c);
    plain.plan(0);
    plain.add(&d);
    QCOMPARE(plain.plan(2, resident0).admitted, std::vector<SequenceState*>{&d});
  }

  void pastTheBoundTheOldestsSetGetsABufferDrainedOrParked() {
    // Two set buffers. The oldest waiting request (set 2) has waited past the bound and its set is
    // not in: it waits for the fill ahead. Meanwhile requests of the sets already running join — but
    // not those of the set making room for set 2, nor those of a set resident but idle: they would
    // take the buffer the fill needs.
    //   Draining (the default): when both buffers are in use, the set whose running sequences end
    //   first (set 0, 3 tokens left against set 1's 7) takes no new requests until it has drained.
    //   Parking: the running set with the least work left, running and queued (set 0: 4 + 4 tokens
    //   against set 1's 8 + 4), is parked at once — its sequence waits with its KV blocks.
    // With one buffer free of running sequences, set 2 fills there and nothing is parked.
    const std::vector<int> resident{0, 1};
    for (const bool park : {false, true}) {
      {
        KvBlockPool blocks(64, std::nullopt);
        Scheduler s({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 1, .park = park, .swap_ahead = true}, blocks, 2);
        SequenceState a{.order = 0, .set = 0, .known = 4, .total = 8}, b{.order = 1, .set = 1, .known = 4, .total = 12};
        s.add(&a);
        s.add(&b);
        QCOMPARE(s.plan(0, resident).admitted, (std::vector<SequenceState*>{&a, &b}));
        a.computed = b.computed = 4;  // prefilled, one token sampled
        a.known = b.known = 5;
        const std::vector<std::int32_t> a_blocks = a.blocks;
        SequenceState c{.order = 2, .arrival = 0.5, .set = 2, .known = 4, .total = 8}, d{.order = 3, .arrival = 0.6, .set = 0, .known = 4, .total = 8},
            e{.order = 4, .arrival = 0.7, .set = 1, .known = 4, .total = 8};
        for (SequenceState* x : {&c, &d, &e}) s.add(x);
        const StepPlan p = s.plan(5, resident);
        QCOMPARE(p.admitted, std::vector<SequenceState*>{&e});
        QCOMPARE(p.upcoming, std::vector<int>{2});
        QVERIFY(p.preempted.empty());
        if (!park) {
          QVERIFY(p.parked.empty());
          QCOMPARE(p.sets, (std::vector<int>{0, 1}));  // set 0 drains in its buffer
        } else {
          QCOMPARE(p.parked, std::vector<SequenceState*>{&a});
          QCOMPARE(p.sets, std::vector<int>{1});
          QVERIFY(a.parked() && !a.running);
          QCOMPARE(a.computed, std::int64_t(4));  // nothing to recompute: its blocks are still its own
          QCOMPARE(a.blocks, a_blocks);
          QCOMPARE(a.parks, std::int64_t(1));
          QCOMPARE(s.waiting(), std::size_t(3));  // c, d and the parked a
        }
      }
      KvBlockPool blocks(64, std::nullopt);
      Scheduler s({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 1, .park = park, .swap_ahead = true}, blocks, 2);
      SequenceState a{.order = 0, .set = 0, .known = 4, .total = 8};
      s.add(&a);
      s.plan(0, resident);
      a.computed = 4;
      a.known = 5;
      SequenceState c{.order = 1, .arrival = 0.5, .set = 2, .known = 4, .total = 8}, d{.order = 2, .arrival = 0.6, .set = 1, .known = 4, .total = 8},
          e{.order = 3, .arrival = 0.7, .set = 0, .known = 4, .total = 8};
      for (SequenceState* x : {&c, &d, &e}) s.add(x);
      const StepPlan p = s.plan(5, resident);  // one buffer free of running sequences: set 2 fills there
      QVERIFY(p.parked.empty());
      QCOMPARE(p.admitted, std::vector<SequenceState*>{&e});
      QCOMPARE(p.upcoming, (std::vector<int>{2, 1}));
    }
  }

  void withinTheBoundASetOutweighingARunningOneGetsItsBuffer() {
    // Two set buffers, both running (set 0's sequence ends first), and requests of both sets keep
    // arriving. Set 2's requests, not in, outweigh set 0's queued work well within the bound: set 0
    // drains (none of its requests join) so that set 2 can be filled into its buffer, and stays
    // drained, whatever the weights, until set 2 is in. Before, no buffer ever freed: set 2 waited
    // for the bound.
    KvBlockPool blocks(256, std::nullopt);
    Scheduler s({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 100, .swap_ahead = true}, blocks, 2);
    SequenceState a{.order = 0, .set = 0, .known = 4, .total = 8}, b{.order = 1, .set = 1, .known = 4, .total = 40};
    s.add(&a);
    s.add(&b);
    const std::vector<int> resident{0, 1};
    QCOMPARE(s.plan(0, resident).admitted.size(), std::size_t(2));
    a.computed = b.computed = 4;
    a.known = b.known = 5;
    std::vector<SequenceState> more{{.order = 2, .arrival = 0.5, .set = 2, .known = 4, .total = 40},
                                    {.order = 3, .arrival = 0.5, .set = 2, .known = 4, .total = 40},
                                    {.order = 4, .arrival = 0.6, .set = 0, .known = 4, .total = 8},
                                    {.order = 5, .arrival = 0.7, .set = 1, .known = 4, .total = 8}};
    for (SequenceState& x : more) s.add(&x);
    StepPlan p = s.plan(1, resident);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&more[3]});  // set 1's; set 0's waits
    QCOMPARE(p.upcoming, std::vector<int>{2});                    // set 0 is not listed: its buffer is set 2's
    // Set 0's queued work now outweighs set 2's: the choice holds all the same.
    std::vector<SequenceState> zeros;
    for (std::uint64_t i = 0; i < 8; ++i) zeros.push_back({.order = 6 + i, .arrival = 0.8, .set = 0, .known = 4, .total = 40});
    for (SequenceState& x : zeros) s.add(&x);
    a.computed = 5;
    a.known = 6;
    more[3].computed = 4;
    more[3].known = 5;
    p = s.plan(2, resident);
    QVERIFY(std::none_of(p.admitted.begin(), p.admitted.end(), [](const SequenceState* x) { return x->set == 0; }));
    QCOMPARE(p.upcoming, std::vector<int>{2});
    // Set 0's sequence ends; set 2 is filled into its buffer, then joins; set 0's requests may join again.
    s.remove(&a);
    const std::vector<int> filling{2, 1}, filled{2};
    p = s.plan(3, filling, filled);
    QVERIFY(p.admitted.empty() || std::none_of(p.admitted.begin(), p.admitted.end(), [](const SequenceState* x) { return x->set != 1; }));
    p = s.plan(4, filling);
    QVERIFY(std::any_of(p.admitted.begin(), p.admitted.end(), [](const SequenceState* x) { return x->set == 2; }));

    // A family change renumbers the sets: a switch under way is given up, and the set it drained
    // takes requests again.
    KvBlockPool blocks2(256, std::nullopt);
    Scheduler t({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 100, .swap_ahead = true}, blocks2, 2);
    SequenceState c{.order = 0, .set = 0, .known = 4, .total = 8}, d{.order = 1, .set = 1, .known = 4, .total = 40};
    t.add(&c);
    t.add(&d);
    t.plan(0, resident);
    c.computed = d.computed = 4;
    c.known = d.known = 5;
    SequenceState twos{.order = 2, .arrival = 0.5, .set = 2, .known = 4, .total = 80}, zero{.order = 3, .arrival = 0.6, .set = 0, .known = 4, .total = 8};
    t.add(&twos);
    t.add(&zero);
    QVERIFY(t.plan(1, resident).admitted.empty());  // set 0 drains for set 2
    c.computed = 5;
    c.known = 6;
    // Renumbered: set 2 is now 3, and 2 another set, with little work waiting; set 0's waiting
    // request now outweighs both. Left as it was, the switch would go on draining set 0 for "set 2".
    twos.set = 3;
    zero.total = 400;
    SequenceState light{.order = 4, .arrival = 0.7, .set = 2, .known = 4, .total = 6};
    t.add(&light);
    t.forget_switch();
    QCOMPARE(t.plan(2, resident).admitted, std::vector<SequenceState*>{&zero});
  }

  void parkingWithinTheBoundASetOutweighingARunningOneGetsItsBuffer() {
    // Parking: two set buffers, both running, and requests of both sets keep arriving. Set 2's requests, not
    // in, outweigh set 0's work (running and queued) well within the bound: set 0 is parked so that
    // set 2 can be filled into its buffer, and stays out, whatever the weights, until set 2 runs.
    // A set keeps its buffer for its turn: at least residency_seconds, and its share of all the work
    // left times the bound. Past it, the parked set's work, now the heaviest, takes the lightest
    // running set's buffer, and the parked sequence resumes where it stopped: the same blocks,
    // nothing recomputed.
    KvBlockPool blocks(256, std::nullopt);
    Scheduler s({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 10, .park = true, .residency_seconds = 1, .swap_ahead = true}, blocks, 2);
    SequenceState a{.order = 0, .set = 0, .known = 4, .total = 8}, b{.order = 1, .set = 1, .known = 4, .total = 40};
    s.add(&a);
    s.add(&b);
    std::vector<int> resident{0, 1};
    QCOMPARE(s.plan(0, resident).admitted.size(), std::size_t(2));
    a.computed = b.computed = 4;
    a.known = b.known = 5;
    std::vector<SequenceState> more{{.order = 2, .arrival = 0.5, .set = 2, .known = 4, .total = 40},
                                    {.order = 3, .arrival = 0.5, .set = 2, .known = 4, .total = 40},
                                    {.order = 4, .arrival = 0.6, .set = 0, .known = 4, .total = 8},
                                    {.order = 5, .arrival = 0.7, .set = 1, .known = 4, .total = 8}};
    s.add(&more[0]);
    s.add(&more[1]);
    // Within their turns (1 s at least) nothing is parked, however heavy set 2's queue.
    StepPlan p = s.plan(0.5, resident);
    QVERIFY(p.parked.empty() && p.admitted.empty());
    QCOMPARE(p.upcoming, (std::vector<int>{2}));
    s.add(&more[2]);
    s.add(&more[3]);
    p = s.plan(1, resident);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&more[3]});  // set 1's; set 0's waits
    QCOMPARE(p.parked, std::vector<SequenceState*>{&a});
    QVERIFY(std::none_of(p.admitted.begin(), p.admitted.end(), [](const SequenceState* x) { return x->set == 0; }));
    QCOMPARE(p.upcoming, std::vector<int>{2});  // set 0 is not listed: its buffer is set 2's
    const std::vector<std::int32_t> a_blocks = a.blocks;
    // Set 0's queued work now outweighs set 2's: the choice holds all the same.
    std::vector<SequenceState> zeros;
    for (std::uint64_t i = 0; i < 8; ++i) zeros.push_back({.order = 6 + i, .arrival = 1.5, .set = 0, .known = 4, .total = 40});
    for (SequenceState& x : zeros) s.add(&x);
    p = s.plan(2, resident);
    QVERIFY(p.parked.empty() && p.admitted.empty());
    QCOMPARE(p.upcoming, std::vector<int>{2});
    // Set 2 is filled into set 0's buffer, then joins; set 0's requests still wait: no buffer is free.
    resident = {2, 1};
    const std::vector<int> filling{2};
    p = s.plan(3, resident, filling);
    QVERIFY(p.admitted.empty());
    p = s.plan(4, resident);
    QCOMPARE(p.admitted, (std::vector<SequenceState*>{&more[0], &more[1]}));
    for (SequenceState* x : p.admitted) x->computed = 4, x->known = 5;
    // Set 0 (a, more[2], zeros: 4 + 8 + 8 × 40 tokens) outweighs set 1 (b and more[3]: 36 + 8), and
    // set 2 came in at 4, within its turn: set 1 is parked for set 0.
    p = s.plan(4.5, resident);
    QCOMPARE(p.parked, (std::vector<SequenceState*>{&more[3], &b}));
    QCOMPARE(p.upcoming.front(), 0);
    resident = {2, 0};
    p = s.plan(5, resident);
    QVERIFY(std::find(p.admitted.begin(), p.admitted.end(), &a) != p.admitted.end());
    const auto chunk = std::find_if(p.chunks.begin(), p.chunks.end(), [&](const StepPlan::Chunk& c) { return c.sequence == &a; });
    QCOMPARE(chunk->tokens, std::int64_t(1));  // its next token only: its prompt's keys and values were kept
    QCOMPARE(a.computed, std::int64_t(4));
    QCOMPARE(a.blocks, a_blocks);
    QCOMPARE(a.preemptions, std::int64_t(0));

    // A family change renumbers the sets: a switch under way is given up, and the set parked for it
    // takes requests again.
    KvBlockPool blocks2(256, std::nullopt);
    Scheduler t({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 10, .park = true, .residency_seconds = 0, .swap_ahead = true}, blocks2, 2);
    SequenceState c{.order = 0, .set = 0, .known = 4, .total = 8}, d{.order = 1, .set = 1, .known = 4, .total = 40};
    t.add(&c);
    t.add(&d);
    resident = {0, 1};
    t.plan(0, resident);
    c.computed = d.computed = 4;
    c.known = d.known = 5;
    SequenceState twos{.order = 2, .arrival = 0.5, .set = 2, .known = 4, .total = 80}, zero{.order = 3, .arrival = 0.6, .set = 0, .known = 4, .total = 8};
    t.add(&twos);
    t.add(&zero);
    p = t.plan(1, resident);
    QVERIFY(p.admitted.empty());
    QCOMPARE(p.parked, std::vector<SequenceState*>{&c});  // set 0 is parked for set 2
    // Renumbered: set 2 is now 3, and 2 another set, with little work waiting; set 0's waiting
    // requests now outweigh both. Left as it was, the switch would go on holding set 0 out for "set 2".
    twos.set = 3;
    zero.total = 400;
    SequenceState light{.order = 4, .arrival = 0.7, .set = 2, .known = 4, .total = 6};
    t.add(&light);
    t.forget_switch();
    // (the parked sequence first: it resumes without recomputing)
    QCOMPARE(t.plan(2, resident).admitted, (std::vector<SequenceState*>{&c, &zero}));
  }

  void parkingParkedSequencesKeepTheirBlocksWhileAnythingRuns() {
    // KV blocks run out. A running sequence that needs one more takes the newest running sequence's
    // (recomputed when it runs again), not a parked one's: a parked sequence may be most of its
    // output from done. Only where nothing would run otherwise does a request take parked blocks.
    KvBlockPool blocks(16, std::optional<std::int64_t>(5));  // 5 blocks of 16 tokens
    Scheduler s({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 5, .park = true, .residency_seconds = 0, .swap_ahead = false}, blocks, 1);
    SequenceState a{.order = 0, .set = 0, .known = 16, .total = 40}, b{.order = 1, .set = 0, .known = 16, .total = 40};
    s.add(&a);
    s.add(&b);
    QCOMPARE(s.plan(0).admitted.size(), std::size_t(2));
    a.computed = b.computed = 16;
    a.known = b.known = 17;
    SequenceState c{.order = 2, .arrival = 0.1, .set = 1, .known = 16, .total = 400}, d{.order = 3, .arrival = 0.2, .set = 1, .known = 16, .total = 400};
    s.add(&c);
    s.add(&d);
    // Set 1's work (768) outweighs set 0's (48), whose turn (5 s × 48 / 816) is over: set 0 parked.
    StepPlan p = s.plan(1);
    QCOMPARE(p.parked, (std::vector<SequenceState*>{&b, &a}));
    QCOMPARE(p.admitted, (std::vector<SequenceState*>{&c, &d}));
    QCOMPARE(blocks.free(), std::int64_t(1));
    c.computed = d.computed = 16;
    c.known = d.known = 17;
    p = s.plan(2);  // c takes the last free block; d, the newest running, gives its own back
    QCOMPARE(p.preempted, std::vector<SequenceState*>{&d});
    QCOMPARE(d.computed, std::int64_t(0));
    QVERIFY(c.running && a.parked() && b.parked());
    QCOMPARE(a.computed, std::int64_t(16));
    QCOMPARE(a.preemptions + b.preemptions, std::int64_t(0));
    QVERIFY(p.admitted.empty());  // d waits: the parked blocks are not taken while c runs
    // Set 1 ends; nothing runs. A request of set 1 that needs more blocks than are free takes the
    // latest parked sequence's.
    s.remove(&c);
    s.remove(&d);
    SequenceState big{.order = 4, .arrival = 2.5, .set = 1, .known = 64, .total = 80};
    s.add(&big);
    p = s.plan(3);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&big});
    QCOMPARE(p.preempted, std::vector<SequenceState*>{&b});
    QVERIFY(a.parked());
    QCOMPARE(b.preemptions, std::int64_t(1));
  }

  void reservedKvAdmitsOnlyWhatTheBlocksCanFinish() {
    // Five blocks of 16 tokens; two requests of 16 prompt tokens that may grow to 40 (3 blocks each).
    // Greedy admission starts both (a block each) and preempts the newer once their growth exhausts
    // the pool, recomputing it later; reserving their longest, the second waits until the first ends
    // and nothing is recomputed. Where nothing runs a request joins whatever its longest.
    for (const KvAdmission mode : {KvAdmission::Greedy, KvAdmission::Reserve}) {
      KvBlockPool blocks(16, std::optional<std::int64_t>(5));
      Scheduler s({.kv_admission = mode}, blocks, 1);
      SequenceState a{.order = 0, .set = 0, .known = 16, .total = 40}, b{.order = 1, .set = 0, .known = 16, .total = 40};
      s.add(&a);
      s.add(&b);
      std::int64_t preempted = 0, computed = 0;
      int a_ended = -1, b_started = -1;
      for (int step = 0; step < 200 && s.running() + s.waiting() > 0; ++step) {
        const StepPlan p = s.plan(step);
        preempted += static_cast<std::int64_t>(p.preempted.size());
        for (const SequenceState* x : p.admitted)
          if (x == &b && b_started < 0) b_started = step;
        for (const StepPlan::Chunk& c : p.chunks) {  // run the step: a token generated once the known ones are cached
          SequenceState& x = *c.sequence;
          x.computed += c.tokens;
          computed += c.tokens;
          if (x.computed < x.known) continue;
          if (x.known < x.total) ++x.known;
          else {
            s.remove(&x);
            if (&x == &a) a_ended = step;
          }
        }
      }
      QCOMPARE(s.running() + s.waiting(), std::size_t(0));
      QCOMPARE(blocks.used(), std::int64_t(0));
      if (mode == KvAdmission::Greedy) {
        QVERIFY2(preempted > 0 && computed > 2 * 40, qPrintable(QString::number(preempted)));
        QVERIFY(b_started == 0);
      } else {
        QCOMPARE(preempted, std::int64_t(0));
        QCOMPARE(computed, std::int64_t(2 * 40));  // every position once
        QCOMPARE(b_started, a_ended + 1);
      }
    }
    // Reserve: a request waits while the running sequences' longest leave no room for its own.
    KvBlockPool blocks(16, std::optional<std::int64_t>(5));
    Scheduler s({.kv_admission = KvAdmission::Reserve}, blocks, 1);
    SequenceState big{.order = 0, .set = 0, .known = 16, .total = 80}, small{.order = 1, .set = 0, .known = 4, .total = 8};
    s.add(&big);
    s.add(&small);
    StepPlan p = s.plan(0);
    QCOMPARE(p.admitted, std::vector<SequenceState*>{&big});  // small waits: big's 5 blocks are every block
    QCOMPARE(blocks.used(), std::int64_t(1));
    // Parking under reserve: a parked sequence keeps its reservation, so a set is parked only where
    // the incoming set's request fits beside it. Here it would not (3 + 3 of 5 blocks): a runs on,
    // as draining would, c and d start once it ends, and nothing is recomputed.
    KvBlockPool blocks2(16, std::optional<std::int64_t>(5));
    Scheduler t({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 5, .park = true, .residency_seconds = 0, .swap_ahead = false,
                 .kv_admission = KvAdmission::Reserve},
                blocks2, 1);
    SequenceState a{.order = 0, .set = 0, .known = 16, .total = 40};
    t.add(&a);
    QCOMPARE(t.plan(0).admitted, std::vector<SequenceState*>{&a});
    a.computed = 16;
    a.known = 17;
    SequenceState c{.order = 1, .arrival = 0.1, .set = 1, .known = 16, .total = 40}, d{.order = 2, .arrival = 0.1, .set = 1, .known = 16, .total = 32};
    t.add(&c);
    t.add(&d);
    double a_done = -1, c_start = -1;
    std::int64_t preempted = 0, parked = 0;
    for (int step = 0; step < 200 && t.running() + t.waiting() > 0; ++step) {
      const double now = 2 + 0.01 * step;
      p = t.plan(now);  // set 1's work (72) outweighs set 0's (23) from the first of these
      preempted += static_cast<std::int64_t>(p.preempted.size());
      parked += static_cast<std::int64_t>(p.parked.size());
      for (const SequenceState* x : p.admitted)
        if (x == &c) c_start = now;
      for (const StepPlan::Chunk& ch : p.chunks) {
        SequenceState& x = *ch.sequence;
        x.computed += ch.tokens;
        if (x.computed < x.known) continue;
        if (x.known < x.total) ++x.known;
        else {
          t.remove(&x);
          if (&x == &a) a_done = now;
        }
      }
    }
    QCOMPARE(preempted, std::int64_t(0));
    QCOMPARE(parked, std::int64_t(0));
    QVERIFY2(a_done >= 0 && c_start > a_done, qPrintable(QStringLiteral("%1 %2").arg(a_done).arg(c_start)));
    QCOMPARE(c.known, c.total);
    QCOMPARE(d.known, d.total);
    QCOMPARE(blocks2.used(), std::int64_t(0));
  }

  void parkingASwitchedOutSetsSequencesAreParkedAndResumeUnchanged() {
    // One set buffer. A long ft1 request runs; ft2 requests arrive while it decodes and outweigh it:
    // ft1's sequence is parked (its KV blocks kept), ft2's start at once, and ft1's resumes once its
    // set is back, nothing recomputed. Every output is what arrival order (no parking) gives; drained
    // instead of parked, ft2's first tokens would have waited for ft1's last.
    std::vector<ServeRequest> load{{"ft1", request(60), false, 0.0}};
    for (int i = 0; i < 6; ++i) load.push_back({"ft2", request(30), false, 1e-3});
    auto serve = [&](SchedulerOptions o, EngineStats& stats) {
      Engine engine(runtime({.resident_sets = 1}), {.scheduler = o, .clock = make_virtual_clock()});
      std::vector<RequestResult> out;
      for (const auto& h : engine.submit_all(load)) out.push_back(h->wait());
      stats = engine.stats();
      return out;
    };
    EngineStats fcfs_stats, parking;
    const auto fcfs = serve({.switching = SwitchPolicy::Fcfs}, fcfs_stats);
    // A bound of 50 ms, so that ft1's turn (its share of the work left, of the bound) ends while it
    // decodes whatever this machine's step time: under the default 2 s an idle machine's Release build
    // decoded all of ft1 within its turn in 1 run of 10, and nothing was parked.
    const auto parked = serve({.switching = SwitchPolicy::Affinity, .max_wait_seconds = 0.05, .park = true, .residency_seconds = 0}, parking);
    QCOMPARE(fcfs_stats.parks, std::int64_t(0));
    QVERIFY2(parking.parks >= 1, qPrintable(QString::number(parking.parks)));
    QCOMPARE(parking.preemptions, std::int64_t(0));
    for (std::size_t i = 0; i < load.size(); ++i) {
      QCOMPARE(parked[i].tokens, fcfs[i].tokens);
      QCOMPARE(parked[i].stats.preemptions, std::int64_t(0));
    }
    for (std::size_t i = 1; i < load.size(); ++i) {
      QVERIFY(fcfs[i].stats.first_token >= fcfs[0].stats.finish);  // arrival order: ft1 to its end first
      QVERIFY(parked[i].stats.first_token < parked[0].stats.finish);
    }
  }

  void lookAheadSwapsFillWhileTheBatchDecodes() {
    // Two set buffers, one long ft1 request, and ft2 and ft3 arriving while it decodes: each one's set
    // is filled ahead into the buffer ft1 does not use (ft3's once ft2 has finished), so the only swap
    // a step waits for in full is ft1's first. Every output is what plain swapping gives.
    const std::vector<ServeRequest> burst{{"ft1", request(40), false, 0.0}, {"ft2", request(5), false, 1e-9}, {"ft3", request(5), false, 2e-9}};
    std::set<int> sets;
    for (const auto& r : burst) sets.insert(runtime()->set_of(store_->index(r.target)));
    QCOMPARE(sets.size(), burst.size());  // three distinct non-expert sets
    auto serve = [&](bool ahead, EngineStats& stats) {
      Engine engine(runtime({.resident_sets = 2}), {.scheduler = {.max_sequences = 8, .swap_ahead = ahead}, .clock = make_virtual_clock()});
      std::vector<RequestResult> out;
      for (const auto& h : engine.submit_all(burst)) out.push_back(h->wait());
      stats = engine.stats();
      return out;
    };
    EngineStats plain_stats, ahead_stats;
    const auto plain = serve(false, plain_stats), ahead = serve(true, ahead_stats);
    QCOMPARE(plain_stats.swaps, std::int64_t(3));
    QCOMPARE(plain_stats.swaps_ahead, std::int64_t(0));
    QCOMPARE(ahead_stats.swaps, std::int64_t(3));
    QCOMPARE(ahead_stats.swaps_ahead, std::int64_t(2));
    for (std::size_t i = 0; i < burst.size(); ++i) {
      QCOMPARE(ahead[i].tokens, plain[i].tokens);
      const RuntimeCounters& c = ahead[i].stats.counters;
      QCOMPARE(c.swaps, std::int64_t(1));
      QCOMPARE(c.swap_bytes, plain[i].stats.counters.swap_bytes);
      QVERIFY(c.swap_bytes > 0);
    }
    // Plain swapping starts ft2 in the step after ft1's prefill, its swap stalling ft1's decode; with
    // look-ahead it joins a step later at the earliest, once its set is in.
    QVERIFY(plain[1].stats.start <= plain[0].stats.first_token);
    QVERIFY(ahead[1].stats.start > ahead[0].stats.first_token);
  }

  void virtualClockReplaysArrivals() {
    // Arrivals an hour apart finish at once in wall time, each served when it arrives: the clock
    // jumps over idle gaps and moves on by the work measured.
    Engine engine(runtime(), {.clock = make_virtual_clock()});
    std::vector<ServeRequest> spaced;
    for (int i = 0; i < 3; ++i) spaced.push_back({"ft1", request(4), false, 3600.0 * i});
    const auto t0 = std::chrono::steady_clock::now();
    const auto handles = engine.submit_all(spaced);
    for (std::size_t i = 0; i < handles.size(); ++i) {
      const RequestStats& st = handles[i]->wait().stats;
      QCOMPARE(st.arrival, 3600.0 * static_cast<double>(i));
      QCOMPARE(st.start, st.arrival);  // nothing else was running
      QVERIFY(st.first_token > st.arrival && st.finish > st.first_token && st.finish < st.arrival + 60);
    }
    QVERIFY(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
    QVERIFY(engine.now() >= 7200);
  }

  void requestsRightAfterAChangeAreNotLost() {
    // Applying a change, the engine lets go of its lock for a moment; requests submitted in that
    // moment, with nothing after them, must still be served (a sweep lends the workbench's engine
    // exactly so: runtime, scheduler, clock, then the whole workload). The delays sweep the moment.
    Engine engine(runtime());
    const auto a = runtime(), b = runtime({.resident_sets = 2});
    for (int i = 0; i < 300; ++i) {
      engine.set_runtime(i % 2 ? a : b);
      engine.set_scheduler({.max_sequences = 1 + i % 3});
      engine.set_clock(i % 2 ? make_virtual_clock() : make_real_clock());
      std::this_thread::sleep_for(std::chrono::microseconds(i % 50));
      const auto handles = engine.submit_all({{"ft1", {.prompt = {1, 2}, .max_new_tokens = 1}}, {"base", {.prompt = {3}, .max_new_tokens = 1}}});
      for (const auto& h : handles)
        QVERIFY2(h->wait_for(std::chrono::seconds(10)), qPrintable(QStringLiteral("round %1: a request never ran").arg(i)));
    }
  }

  void replacingTheRuntimeMidRequest() {
    // Requests in flight when the runtime changes are recomputed under the new one and finish.
    Engine engine(runtime());
    auto h = submit_running(engine, {"ft2", request(20)});
    std::vector<PinnedExpert> all;
    for (std::int64_t l = 0; l < 3; ++l)
      for (std::int64_t e = 0; e < 8; ++e) all.push_back({l, e, 2});
    engine.set_runtime(std::make_shared<Runtime>(*store_, RuntimeConfig{.pinned = all, .hit = HitPolicy::Strict}));
    const RequestResult& r = h->wait();
    QCOMPARE(r.finish, Finish::Length);
    QCOMPARE(r.tokens.size(), std::size_t(20));
    auto after = engine.submit({"ft2", request(5)});
    QCOMPARE(after->wait().stats.counters.total().misses, std::int64_t(0));  // the new runtime pins all of ft2
  }

  // A family change served in place: ft2 removed and ft3 added while an ft1 request runs. The
  // request keeps its KV cache (no preemption) and its tokens; only the slots whose owner changed
  // are copied; a removed target is refused and an added one served.
  void aFamilyChangeIsServedInPlaceWhileARequestRuns() {
    FamilyChange change = family_change();
    const RuntimeConfig strict{.pinned = change.before_pins, .hit = HitPolicy::Strict};
    const std::vector<std::int64_t> alone = Engine(std::make_shared<Runtime>(*change.before, strict)).submit({"ft1", request(24)})->wait().tokens;

    Engine engine(std::make_shared<Runtime>(*change.before, strict));
    auto running = submit_running(engine, {"ft1", request(24)});
    std::string why_not;
    const auto config = engine.runtime()->in_place(*change.after, {.pinned = change.after_pins, .hit = HitPolicy::Strict}, why_not);
    QVERIFY2(config, why_not.c_str());
    const RebaseResult moved = engine.rebase(change.after, *config).get();
    const RequestResult& r = running->wait();
    QCOMPARE(r.finish, Finish::Length);
    QCOMPARE(r.stats.preemptions, std::int64_t(0));  // its KV cache stayed
    QCOMPARE(r.tokens, alone);
    QCOMPARE(moved.kept + moved.copies, static_cast<std::int64_t>(change.after_pins.size()));
    QVERIFY(moved.copies > 0 && moved.kept > 0);
    QCOMPARE(moved.copy_bytes, static_cast<std::uint64_t>(moved.copies) * pin_bytes(*change.after, change.after_pins.front(), false));
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, engine.submit({"ft2", request(4)}));
    const std::vector<std::int64_t> ft3 = engine.submit({"ft3", request(8)})->wait().tokens;
    QCOMPARE(ft3, Engine(std::make_shared<Runtime>(*change.after, strict)).submit({"ft3", request(8)})->wait().tokens);
  }

  // Once a change's copies have landed, every row of every layer reads the same bytes as in a
  // runtime built afresh for the next family (consolidated hits: rows without their own expert
  // take the position's first pinned copy), and so generates the same tokens; until then the rows
  // of the moved slots miss.
  void aChangeInPlaceServesWhatAFreshRuntimeWould() {
    FamilyChange change = family_change();
    const auto rt = std::make_shared<Runtime>(*change.before, RuntimeConfig{.pinned = change.before_pins});
    std::string why_not;
    const auto config = rt->in_place(*change.after, {.pinned = change.after_pins}, why_not);
    QVERIFY2(config, why_not.c_str());
    const RebaseResult moved = rt->rebase(change.after, *config);
    QCOMPARE(rt->repins().pending, moved.copies);
    const auto fresh = std::make_shared<Runtime>(*change.after, RuntimeConfig{.pinned = change.after_pins});
    auto served = [](const Runtime& x, std::int64_t l, int row, std::int64_t e) {
      const std::int32_t slot = x.reroute(l).at(row, e);
      return slot == RerouteTable::kMiss ? ExpertId(-1) : x.slots(l).content(slot);
    };
    const ModelSpec& s = change.after->spec();
    std::int64_t missing = 0;
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      for (int row = 0; row < change.after->targets(); ++row)
        for (std::int64_t e = 0; e < s.num_experts; ++e) missing += served(*rt, l, row, e) != served(*fresh, l, row, e);
    QVERIFY(missing > 0);  // the moved slots' rows, until their copies land
    rt->repin(std::nullopt);
    QCOMPARE(rt->repins().pending, std::int64_t(0));
    QCOMPARE(rt->repins().copies, moved.copies);
    for (std::int64_t l = 0; l < s.num_layers; ++l)
      for (int row = 0; row < change.after->targets(); ++row)
        for (std::int64_t e = 0; e < s.num_experts; ++e)
          QVERIFY2(served(*rt, l, row, e) == served(*fresh, l, row, e), qPrintable(QStringLiteral("layer %1 row %2 expert %3").arg(l).arg(row).arg(e)));
    for (const char* target : {"ft1", "ft3", "base"})
      QCOMPARE(Engine(rt).submit({target, request(8)})->wait().tokens, Engine(fresh).submit({target, request(8)})->wait().tokens);
  }

  // Weights read where the checkpoints are mapped (CpuWeights::Mapped) through a change of family in
  // place: once the previous family's files are unmapped, every slot and buffer reads the next
  // family's (a view left behind would fault), and the tokens are a fresh runtime's.
  void aChangeInPlaceRepointsWeightsReadInPlace() {
    FamilyChange change = family_change();
    const RuntimeConfig before{.pinned = change.before_pins, .hit = HitPolicy::Strict, .resident_sets = 2, .cpu_weights = CpuWeights::Mapped};
    Engine engine(std::make_shared<Runtime>(*change.before, before));
    for (const char* target : {"ft1", "ft2"}) QCOMPARE(engine.submit({target, request(4)})->wait().finish, Finish::Length);
    RuntimeConfig after = before;
    after.pinned = change.after_pins;
    std::string why_not;
    // Not onto a store under a host budget, which a new backend reading in place would refuse too.
    const HostStore budgeted(*change.after_family, std::uint64_t{1} << 30);
    QVERIFY(!engine.runtime()->in_place(budgeted, after, why_not));
    QVERIFY2(why_not.find("host budget") != std::string::npos, why_not.c_str());
    const auto config = engine.runtime()->in_place(*change.after, after, why_not);
    QVERIFY2(config, why_not.c_str());
    const RebaseResult moved = engine.rebase(change.after, *config).get();
    QVERIFY(moved.copies > 0);
    QCOMPARE(moved.copy_bytes, std::uint64_t(0));  // a slot that reads in place copies nothing
    change.before.reset();
    change.before_family.reset();  // its checkpoints unmapped
    const auto fresh = std::make_shared<Runtime>(*change.after, RuntimeConfig{.pinned = change.after_pins, .hit = HitPolicy::Strict});
    for (const char* target : {"ft1", "ft3", "base"})
      QCOMPARE(engine.submit({target, request(8)})->wait().tokens, Engine(fresh).submit({target, request(8)})->wait().tokens);
  }

  // Finite weights whose products overflow float (layer 1's output projection at 3e38) make that
  // variant's hidden states infinite: its request fails naming the layer, and the requests batched
  // with it are untouched (the same tokens as served alone), as are the requests after it.
  void valuesThatAreNotFiniteFailOnlyTheirRequest() {
    const fs::path overflow = copy_checkpoint(fixture("qwen2_moe", "ft1"), scratch("overflow"));
    rewrite_weights(overflow, [](const TensorInfo&) { return true; }, [](const TensorInfo& t, std::vector<std::byte>& bytes) {
      if (t.name != "model.layers.1.self_attn.o_proj.weight") return;
      QCOMPARE(t.dtype, DType::F32);
      const float big = 3e38f;
      for (std::size_t i = 0; i + sizeof big <= bytes.size(); i += sizeof big) std::memcpy(bytes.data() + i, &big, sizeof big);
    });
    Family family;
    for (const char* v : {"base", "ft1"}) family.add(v, fixture("qwen2_moe", v));
    family.add("overflow", overflow);
    const HostStore store(family);
    Engine engine(std::make_shared<Runtime>(store, RuntimeConfig{.resident_sets = 3}));
    const std::vector<std::int64_t> base_alone = engine.submit({"base", request(6)})->wait().tokens;
    const std::vector<std::int64_t> ft1_alone = engine.submit({"ft1", request(6)})->wait().tokens;

    auto bad = engine.submit({"overflow", request(6)});
    auto base = engine.submit({"base", request(6)});
    auto ft1 = engine.submit({"ft1", request(6)});
    const RequestResult& r = bad->wait();
    QCOMPARE(r.finish, Finish::Failed);
    expect_mentions(r.error, {"'overflow'", "layer 1", "not finite"});
    QVERIFY(r.tokens.empty());
    QCOMPARE(base->wait().tokens, base_alone);
    QCOMPARE(ft1->wait().tokens, ft1_alone);
    QVERIFY(engine.stats().largest_step_sequences >= 2);  // they did share steps
    QCOMPARE(engine.submit({"base", request(6)})->wait().tokens, base_alone);
  }
};

QTEST_GUILESS_MAIN(TestEngine)
#include "tst_engine.moc"
