// The CUDA backend's host-side logic, on any machine: a step's inputs as the device reads them
// (positions, reroute rows, KV block lists, rotary angles as transformers computes them, the rows
// whose logits return) and a host routing plan laid out as grouped pairs (consecutive positions per
// slot, waves in order, large groups apart, dropped pairs unserved).
#include <QTest>

#include <cmath>
#include <set>

#include "common/error.h"
#include "model/synthetic.h"
#include "runtime/cuda/grouped_plan.h"
#include "runtime/cuda/step_inputs.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

class TestCudaPlan : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void stepInputsDescribeEveryToken() {
    ModelSpec s = mixtral_like_spec(100, 64, 32, 2, 4);
    const std::vector<std::int64_t> prompt{1, 2, 3, 4, 5}, decode{7};
    const std::vector<std::int32_t> blocks_a{3, 9, 6}, blocks_b{4};
    StepBatch batch;
    batch.sequences = 2;
    batch.chunks.push_back({.sequence = 0, .target = 2, .buffer = 0, .tokens = prompt, .start = 12, .blocks = blocks_a, .emit = Emit::All});
    batch.chunks.push_back({.sequence = 1, .target = 1, .buffer = 1, .tokens = decode, .start = 3, .blocks = blocks_b, .emit = Emit::Last});
    const auto inv = cuda::inverse_frequencies(s);
    QCOMPARE(inv.size(), std::size_t(s.head_dim / 2));
    QVERIFY(std::abs(inv[1] - 1.0 / std::pow(s.rope_theta, 2.0 / double(s.head_dim))) < 1e-6);
    const cuda::StepInputs in = cuda::step_inputs(batch, s, inv, 8);
    QCOMPARE(in.tokens, std::int64_t(6));
    QCOMPARE(in.positions, (std::vector<std::int32_t>{12, 13, 14, 15, 16, 3}));
    QCOMPARE(in.rows, (std::vector<std::int32_t>{2, 2, 2, 2, 2, 1}));
    QCOMPARE(in.block_offset, (std::vector<std::int32_t>{0, 0, 0, 0, 0, 3}));
    QCOMPARE(in.blocks, (std::vector<std::int32_t>{3, 9, 6, 4}));
    QCOMPARE(in.highest_block, std::int64_t(9));
    QCOMPARE(in.max_positions, 17);
    QCOMPARE(in.groups.size(), std::size_t(2));
    QCOMPARE(in.wanted, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
    QCOMPARE(in.distinct_rows, (std::vector<std::int32_t>{1, 2}));
    // cos/sin of position · frequency, the halves repeated.
    const std::size_t hd = static_cast<std::size_t>(s.head_dim);
    QVERIFY(std::abs(in.cos[2 * hd + 1] - std::cos(14.0f * inv[1])) < 1e-6f);
    QVERIFY(std::abs(in.sin[2 * hd + hd / 2 + 1] - std::sin(14.0f * inv[1])) < 1e-6f);
    // Packed: aligned, and the bytes round-trip.
    const cuda::PackedInputs p = cuda::pack(in);
    for (std::size_t off : {p.ids, p.rows, p.positions, p.block_offset, p.blocks, p.wanted, p.cos, p.sin}) QCOMPARE(off % 256, std::size_t(0));
    QCOMPARE(reinterpret_cast<const std::int32_t*>(p.bytes.data() + p.positions)[4], 16);
    QCOMPARE(reinterpret_cast<const float*>(p.bytes.data() + p.sin)[2 * hd + hd / 2 + 1], in.sin[2 * hd + hd / 2 + 1]);
  }

  void graphedStepsKeepTheirOffsets() {
    // Inputs of a graph replay lie at the same offsets whatever the step, and what does not fit is refused.
    ModelSpec s = mixtral_like_spec(100, 64, 32, 2, 4);
    const std::vector<std::int64_t> one{5}, two{6, 7};
    const std::vector<std::int32_t> blocks{2};
    StepBatch a, b;
    a.sequences = b.sequences = 1;
    a.chunks.push_back({.tokens = one, .start = 3, .blocks = blocks});
    b.chunks.push_back({.tokens = two, .start = 9, .blocks = blocks});
    const auto inv = cuda::inverse_frequencies(s);
    const auto pa = cuda::pack_fixed(cuda::step_inputs(a, s, inv, 16), 8, 64, s.head_dim);
    const auto pb = cuda::pack_fixed(cuda::step_inputs(b, s, inv, 16), 8, 64, s.head_dim);
    QCOMPARE(pa.bytes.size(), pb.bytes.size());
    for (auto m : {&cuda::PackedInputs::ids, &cuda::PackedInputs::blocks, &cuda::PackedInputs::wanted, &cuda::PackedInputs::sin})
      QCOMPARE(pa.*m, pb.*m);
    QCOMPARE(reinterpret_cast<const std::int32_t*>(pb.bytes.data() + pb.positions)[1], 10);
    expect_mentions(error_of<InvalidArgument>([&] { cuda::pack_fixed(cuda::step_inputs(b, s, inv, 16), 1, 64, s.head_dim); }), {"2 tokens", "fixed input layout"});
  }

  void badStepsAreRefused() {
    ModelSpec s = mixtral_like_spec(100, 64, 32, 2, 4);
    const std::vector<std::int64_t> tokens{1, 2, 3}, outside{100};
    const std::vector<std::int32_t> one{0};
    StepBatch batch;
    batch.sequences = 1;
    batch.chunks.push_back({.tokens = tokens, .start = 14, .blocks = one});  // 17 positions in one block of 16
    expect_mentions(error_of<InvalidArgument>([&] { cuda::step_inputs(batch, s, cuda::inverse_frequencies(s), 16); }), {"KV blocks"});
    batch.chunks[0] = {.tokens = outside, .start = 0, .blocks = one};
    expect_mentions(error_of<InvalidArgument>([&] { cuda::step_inputs(batch, s, cuda::inverse_frequencies(s), 16); }), {"token id 100", "vocabulary"});
  }

  void groupedPlanLaysOutPairsBySlot() {
    RoutePlan plan;
    plan.outcome = {PairOutcome::Hit, PairOutcome::Miss, PairOutcome::Dropped, PairOutcome::Hit, PairOutcome::Hit, PairOutcome::Miss};
    plan.waves.resize(2);
    plan.waves[0].groups = {{{false, 3}, {0, 3, 4}}, {{true, 0}, {1}}};
    plan.waves[0].loads = {{{true, 0}, 17, {}, 1}};
    plan.waves[1].groups = {{{true, 0}, {5}}};
    plan.waves[1].loads = {{{true, 0}, 18, {}, 5}};
    const cuda::GroupedPlan g = cuda::grouped_plan(plan, 3);
    QCOMPARE(g.pair_at, (std::vector<std::int32_t>{0, 3, 4, 1, 5}));
    QCOMPARE(g.pos_of, (std::vector<std::int32_t>{0, 3, -1, 1, 2, 4}));
    QCOMPARE(g.waves.size(), std::size_t(2));
    QCOMPARE(g.waves[0].large.size(), std::size_t(1));  // three pairs: from large_from on
    QCOMPARE(g.waves[0].large[0].begin, 0);
    QCOMPARE(g.waves[0].large[0].end, 3);
    QCOMPARE(g.waves[0].small.size(), std::size_t(1));
    QVERIFY(g.waves[0].small[0].slot == (SlotRef{true, 0}));
    QCOMPARE(g.waves[1].small[0].begin, 4);
    QCOMPARE(g.waves[1].loads[0].content, ExpertId(18));
    // Every served pair has one position and the position holds it.
    for (std::size_t p = 0; p < g.pos_of.size(); ++p)
      if (g.pos_of[p] >= 0) QCOMPARE(g.pair_at[static_cast<std::size_t>(g.pos_of[p])], std::int32_t(p));
  }
};

QTEST_GUILESS_MAIN(TestCudaPlan)
#include "tst_cuda_plan.moc"
