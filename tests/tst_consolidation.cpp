// The consolidation planner: rank order and its ties, the paper's round-robin, the medoid and
// weighted policies, capacity from a byte budget at its edges, and byte sizes as people write them.
#include <QTest>

#include <cmath>

#include "runtime/capacity.h"
#include "analysis/consolidation.h"
#include "common/byte_size.h"
#include "common/error.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {
// A family of `variants` with the given position distances; NaN marks a dense layer. Pair
// distances are all d/pairs unless set later.
ExpertDistances distances(std::int64_t layers, std::int64_t experts, std::int64_t variants, std::vector<double> d) {
  ExpertDistances x;
  x.layers = layers;
  x.experts = experts;
  x.variants = variants;
  x.position = std::move(d);
  x.pairs.resize(static_cast<std::size_t>(x.pair_count() * layers * experts));
  for (std::int64_t p = 0; p < x.pair_count(); ++p)
    for (std::int64_t c = 0; c < layers * experts; ++c)
      x.pairs[static_cast<std::size_t>(p * layers * experts + c)] = x.position[static_cast<std::size_t>(c)] / static_cast<double>(x.pair_count());
  return x;
}
const double kNaN = std::nan("");
}  // namespace

class TestConsolidation : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void rankIsAscendingDistanceTiesByLayerThenExpert() {
    // 3 layers × 3 experts; layer 1 dense.
    const auto d = distances(3, 3, 2, {5, 1, 3,  kNaN, kNaN, kNaN,  1, 0.5, 3});
    // ascending: (2,1)=0.5, then the 1s: (0,1) before (2,0), then 3s: (0,2), (2,2), then 5: (0,0)
    QCOMPARE(rank_positions(d), (std::vector<std::int64_t>{7, 1, 6, 2, 8, 0}));
    const auto plan = plan_consolidation(d, 100, Policy::RoundRobin);
    QCOMPARE(plan.capacity, std::int64_t(6));  // clamped to the MoE positions, not L·E = 9
    QCOMPARE(plan.rank, (std::vector<std::int64_t>{5, 1, 3, -1, -1, -1, 2, 0, 4}));
    for (std::int64_t e = 0; e < 3; ++e) QCOMPARE(plan.resident(1, e), -1);  // nothing in the dense layer
  }

  void roundRobinAssignsInRankOrder() {
    const auto d = distances(2, 4, 3, {8, 7, 6, 5, 4, 3, 2, 1});  // rank r is position 7 - r
    const auto plan = plan_consolidation(d, 5, Policy::RoundRobin);
    // ranks 0..4 are positions 7, 6, 5, 4, 3 → variants 0, 1, 2, 0, 1; the rest stay out.
    QCOMPARE(plan.map, (std::vector<int>{-1, -1, -1, 1, 0, 2, 1, 0}));
    QCOMPARE(plan.resident_counts(), (std::vector<std::int64_t>{2, 2, 1}));
    QCOMPARE(plan_consolidation(d, 0, Policy::RoundRobin).map, std::vector<int>(8, -1));
    QCOMPARE(plan_consolidation(d, -3, Policy::RoundRobin).capacity, std::int64_t(0));
    const auto all = plan_consolidation(d, 8, Policy::RoundRobin);
    QCOMPARE(all.resident_counts(), (std::vector<std::int64_t>{3, 3, 2}));
    QCOMPARE(all.distance, d.position);
  }

  void layerCapsPassOverFullLayers() {
    // A family changed while it serves is planned into its runtime's slots: layer 1 holds 1 copy,
    // so ranks past it go to layer 0, and the turns count the positions kept, not the ranks.
    const auto d = distances(2, 4, 3, {8, 7, 6, 5, 4, 3, 2, 1});  // rank r is position 7 - r
    const std::vector<std::int64_t> caps{4, 1};
    const auto plan = plan_consolidation(d, 3, Policy::RoundRobin, {}, caps);
    // rank 0 = position 7 (layer 1) → variant 0; ranks 1–3 in layer 1 passed over; then positions 3, 2.
    QCOMPARE(plan.map, (std::vector<int>{-1, -1, 2, 1, -1, -1, -1, 0}));
    QCOMPARE(plan.capacity, std::int64_t(3));
    QCOMPARE(plan.rank, plan_consolidation(d, 3, Policy::RoundRobin).rank);  // ranks do not change
    QCOMPARE(plan_consolidation(d, 8, Policy::RoundRobin, {}, caps).capacity, std::int64_t(5));  // all the caps hold
    QVERIFY_THROWS_EXCEPTION(InvalidArgument, plan_consolidation(d, 3, Policy::RoundRobin, {}, std::vector<std::int64_t>{1}));
  }

  void medoidKeepsTheCopyClosestToTheOthers() {
    auto d = distances(1, 2, 3, {3, 10});
    // position 0: variant 2 sits between 0 and 1 (d02 = d12 = 1, d01 = 2) → 2 is the medoid.
    auto set = [&](std::int64_t i, std::int64_t j, std::int64_t e, double v) { d.pairs[static_cast<std::size_t>(d.pair_index(i, j) * 2 + e)] = v; };
    set(0, 1, 0, 2), set(0, 2, 0, 1), set(1, 2, 0, 1);
    // position 1: variant 1 is the medoid.
    set(0, 1, 1, 3), set(0, 2, 1, 6), set(1, 2, 1, 3);
    const auto plan = plan_consolidation(d, 2, Policy::Medoid);
    QCOMPARE(plan.map, (std::vector<int>{2, 1}));
    // Equal sums: the lowest index wins.
    set(0, 1, 0, 1), set(0, 2, 0, 1), set(1, 2, 0, 1);
    QCOMPARE(plan_consolidation(d, 1, Policy::Medoid).map, (std::vector<int>{0, -1}));
  }

  void weightedFollowsTheShares() {
    std::vector<double> d(16);
    for (int i = 0; i < 16; ++i) d[static_cast<std::size_t>(i)] = i;
    const auto x = distances(2, 8, 2, d);
    const double shares[] = {3, 1};
    const auto plan = plan_consolidation(x, 8, Policy::Weighted, shares);
    QCOMPARE(plan.resident_counts(), (std::vector<std::int64_t>{6, 2}));
    QCOMPARE(plan.shares, (std::vector<double>{0.75, 0.25}));
    // Every prefix of the ranking is as close to the shares as it can be.
    std::int64_t first = 0;
    for (std::int64_t r = 0; r < 8; ++r) {
      first += plan.map[static_cast<std::size_t>(r)] == 0;
      QVERIFY(std::abs(static_cast<double>(first) - 0.75 * static_cast<double>(r + 1)) <= 1.0);
    }
    // Equal shares are the paper's round-robin.
    const double equal[] = {1, 1};
    QCOMPARE(plan_consolidation(x, 7, Policy::Weighted, equal).map, plan_consolidation(x, 7, Policy::RoundRobin).map);
    const double bad[] = {1, 0};
    expect_mentions(error_of<InvalidArgument>([&] { plan_consolidation(x, 4, Policy::Weighted, bad); }), {"shares", "positive"});
    const double three[] = {1, 1, 1};
    expect_mentions(error_of<InvalidArgument>([&] { plan_consolidation(x, 4, Policy::Weighted, three); }),
                    {"3 shares given for 2 variants"});
  }

  void policyNames() {
    for (Policy p : {Policy::RoundRobin, Policy::Medoid, Policy::Weighted}) QCOMPARE(parse_policy(policy_name(p)), std::optional(p));
    QVERIFY(!parse_policy("random"));
  }

  void capacityArithmeticAtTheEdges() {
    const Checkpoint ck(fixture("olmoe", "base"));
    const ModelSpec& s = ck.spec();
    const std::uint64_t per_expert = ck.expert_bytes(0, 0), non_expert = ck.non_expert_bytes();
    const ReserveSpec r{.context_tokens = 256, .requests = 2, .prefill_chunk = 64, .miss_slots = 3, .kv_bytes = 2};
    const auto items = plan_reserve(s, per_expert, r);
    QCOMPARE(items.size(), std::size_t(3));
    QCOMPARE(items[0].bytes, std::uint64_t(2 * s.num_layers * s.num_kv_heads * s.head_dim * 256 * 2 * 2));
    QCOMPARE(items[2].bytes, 3 * per_expert);
    QVERIFY(items[1].bytes > 0);
    std::uint64_t reserve = 0;
    for (const auto& i : items) reserve += i.bytes;
    const std::uint64_t minimum = non_expert + reserve;

    QCOMPARE(plan_capacity(s, non_expert, per_expert, minimum, r).capacity, std::int64_t(0));
    QCOMPARE(plan_capacity(s, non_expert, per_expert, minimum + per_expert - 1, r).capacity, std::int64_t(0));
    QCOMPARE(plan_capacity(s, non_expert, per_expert, minimum + 5 * per_expert, r).capacity, std::int64_t(5));
    QCOMPARE(plan_capacity(s, non_expert, per_expert, minimum + 6 * per_expert - 1, r).capacity, std::int64_t(5));
    const auto all = plan_capacity(s, non_expert, per_expert, minimum + 1000 * per_expert, r);
    QCOMPARE(all.capacity, std::int64_t(24));  // clamped to L·E
    QCOMPARE(all.minimum_budget(), minimum);
    QCOMPARE(all.reserve_bytes(), reserve);

    const std::string msg = error_of<BudgetError>([&] { plan_capacity(s, non_expert, per_expert, minimum - 1, r); });
    expect_mentions(msg, {"below the minimum", std::to_string(minimum) + " bytes", "kv cache", "miss slots"});
    expect_mentions(error_of<InvalidArgument>([&] { plan_reserve(s, per_expert, {.context_tokens = -1}); }), {"context tokens"});
    // Sizes past 64 bits are refused naming the item, never wrapped to a small reserve (2^62 tokens
    // of context gave a 0-byte KV cache and a layout with exit 0).
    constexpr std::int64_t huge = std::int64_t{1} << 62;
    expect_mentions(error_of<InvalidArgument>([&] { plan_reserve(s, per_expert, {.requests = huge}); }), {"reserve", "kv cache", "64 bits"});
    // No request holds more than the model's context: a longer reserve is counted at the context
    // (the default 4096 for a 512-token model kept 8 times the KV cache and score rows), and says so.
    const std::int64_t context = s.max_position_embeddings;
    QVERIFY(context > 0);
    const auto at_context = plan_reserve(s, per_expert, {.context_tokens = context});
    const auto past = plan_reserve(s, per_expert, {.context_tokens = huge});
    QCOMPARE(past[0].bytes, at_context[0].bytes);  // kv cache
    QCOMPARE(past[1].bytes, at_context[1].bytes);  // activations (a score row over the context)
    QVERIFY2(past[0].detail.find("the model's context") != std::string::npos, past[0].detail.c_str());
    QVERIFY(plan_reserve(s, per_expert, {.context_tokens = context / 2})[0].bytes < at_context[0].bytes);
    expect_mentions(error_of<InvalidArgument>([&] { plan_reserve(s, per_expert, {.prefill_chunk = huge}); }), {"reserve", "prefill chunk", "64 bits"});
    expect_mentions(error_of<InvalidArgument>([&] { plan_reserve(s, per_expert, {.miss_slots = huge}); }), {"reserve", "miss slots", "64 bits"});
    expect_mentions(error_of<InvalidArgument>([&] { plan_capacity(s, ~std::uint64_t{0} - 4, per_expert, ~std::uint64_t{0}, r); }), {"64 bits"});

    // For a family, the largest variant's bytes.
    Family f;
    f.add("base", fixture("olmoe", "base"));
    f.add("ft1", fixture("olmoe", "ft1"));
    QCOMPARE(plan_capacity(f, minimum + 7 * per_expert, r).capacity, std::int64_t(7));
    QCOMPARE(clamp_capacity(99, s), std::int64_t(24));
    QCOMPARE(clamp_capacity(-1, s), std::int64_t(0));
  }

  void residentSetsAutoUnderABudget() {
    // A second non-expert set when it costs at most an eighth of the positions one set leaves.
    CapacityPlan one{.budget_bytes = 0, .non_expert_bytes = 300, .bytes_per_expert = 100, .positions = 64, .capacity = 24};
    QCOMPARE(planned_sets(one, 4), 2);  // 3 positions of 24
    QCOMPARE(with_sets(one, 2).capacity, std::int64_t(21));
    QCOMPARE(planned_sets(one, 1), 1);  // one set is all the targets use
    one.capacity = 23;
    QCOMPARE(planned_sets(one, 4), 1);  // 3 × 8 = 24 > 23
    one.non_expert_bytes = 301;         // a set costs whole positions: ⌈301 / 100⌉ = 4
    QCOMPARE(with_sets(one, 2).capacity, std::int64_t(19));
    QCOMPARE(with_sets(one, 9).capacity, std::int64_t(0));  // never below none
    // The tiers: RAM within the host budget, the rest on disk; without one, all in RAM.
    QCOMPARE(tier_bytes(1000, 300, 400).disk, std::uint64_t(600));
    QCOMPARE(tier_bytes(1000, 300, std::nullopt).ram, std::uint64_t(1000));
    QCOMPARE(tier_bytes(1000, 300, 4000).ram, std::uint64_t(1000));
  }

  void byteSizes() {
    QCOMPARE(parse_byte_size("12GiB"), std::optional<std::uint64_t>(12ull << 30));
    QCOMPARE(parse_byte_size("1.5 kib"), std::optional<std::uint64_t>(1536));
    QCOMPARE(parse_byte_size("900MB"), std::optional<std::uint64_t>(900'000'000));
    QCOMPARE(parse_byte_size("4096"), std::optional<std::uint64_t>(4096));
    QCOMPARE(parse_byte_size("2g"), std::optional<std::uint64_t>(2ull << 30));
    for (const char* bad : {"", "GiB", "12 parsecs", "-1GB", "1e99TB"}) QVERIFY2(!parse_byte_size(bad), bad);
    // Every IEC and SI unit; a size beyond any machine is refused with that reason, not "not a byte size".
    QCOMPARE(parse_byte_size("2PiB"), std::optional<std::uint64_t>(2ull << 50));
    QCOMPARE(parse_byte_size("3 EB"), std::optional<std::uint64_t>(3'000'000'000'000'000'000ull));
    QVERIFY(!parse_byte_size("10EiB"));
    QVERIFY2(byte_size_problem("10EiB").find("more than 8 EiB") != std::string::npos, byte_size_problem("10EiB").c_str());
    QVERIFY(byte_size_problem("12 parsecs").find("unknown unit") != std::string::npos);
    QVERIFY(byte_size_problem("GiB").find("no number") != std::string::npos);
    QVERIFY(byte_size_problem("12GiB").empty());
    QCOMPARE(format_bytes(512), std::string("512 B"));
    QCOMPARE(format_bytes(3ull << 30), std::string("3.00 GiB"));
    QCOMPARE(format_bytes(5ull << 40), std::string("5.00 TiB"));  // not "5120.00 GiB"
    QCOMPARE(format_bytes(1ull << 63), std::string("8.00 EiB"));
  }
};

QTEST_GUILESS_MAIN(TestConsolidation)
#include "tst_consolidation.moc"
