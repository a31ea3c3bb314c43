// The CUDA backend's host-side logic, on any machine: a step's inputs as the device reads them
// (positions, reroute rows, KV block lists, rotary angles as transformers computes them, the rows
// whose logits return) and a host routing plan laid out as grouped pairs (consecutive positions per
// slot, waves in order, large groups apart, dropped pairs unserved; delta groups bundled over their
// base), and a delta expert's packed arrays as the one block a load copies.
#include <QTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "common/error.h"
#include "model/synthetic.h"
#include "kernels/paged_attention.h"
#include "model/delta_codec.h"
#include "runtime/cuda/delta_block.h"
#include "runtime/cuda/grouped_plan.h"
#include "runtime/delta_view.h"
#include "runtime/cuda_options.h"
#include "runtime/page_map.h"
#include "runtime/cuda/step_inputs.h"
#include "model/rope.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;

namespace {

std::vector<float> normal_values(std::size_t n, unsigned seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

}  // namespace

class TestCudaPlan : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  // The CUDA backend's switches come from the runtime's configuration; an operator's MOSAIC_CUDA_*
  // variables override them ("0" off, anything else on), read in one place, and unset ones leave
  // what was given.
  void cudaOptionsTakeTheEnvironmentOverWhatWasGiven() {
    const CudaOptions given{.graphs = false, .tiled_attention = false, .virtual_memory = true};
    CudaOptions o = with_environment(given, [](const char*) -> const char* { return nullptr; });
    QVERIFY(!o.graphs && o.fused && !o.tiled_attention && o.prepared_draws && o.layer_times && o.l2_prefetch);
    QCOMPARE(o.virtual_memory, std::optional<bool>(true));
    QCOMPARE(o.programmatic_launches, std::optional<bool>());
    o = with_environment(given, [](const char* name) -> const char* {
      static const std::map<std::string, const char*> set{{"MOSAIC_CUDA_GRAPHS", "1"},      {"MOSAIC_CUDA_FUSED", "0"},
                                                          {"MOSAIC_CUDA_DRAWS", "0"},       {"MOSAIC_CUDA_LAYER_TIMES", "0"},
                                                          {"MOSAIC_CUDA_L2_PREFETCH", "0"}, {"MOSAIC_CUDA_VMM", "0"},
                                                          {"MOSAIC_CUDA_PDL", "1"},         {"MOSAIC_CUDA_TENSOR_CORE_EXPERTS", "1"},
                                                          {"MOSAIC_CUDA_TENSOR_CORE_ATTENTION", "1"},
                                                          {"MOSAIC_CUDA_DEVICE_ROUTE_PAIRS", "512"}};
      const auto it = set.find(name);
      return it == set.end() ? nullptr : it->second;
    });
    QVERIFY(o.graphs && !o.fused && !o.tiled_attention && !o.prepared_draws && !o.layer_times && !o.l2_prefetch);
    QCOMPARE(o.virtual_memory, std::optional<bool>(false));
    QCOMPARE(o.programmatic_launches, std::optional<bool>(true));
    QVERIFY(o.tensor_core_experts && o.tensor_core_attention);
    QCOMPARE(o.device_route_pairs, 512);
    // A count that is not one, or past what one routing launch holds, leaves the given one.
    for (const char* bad : {"many", "2048", "-1", "64k"}) {
      static const char* value = nullptr;
      value = bad;
      o = with_environment(given, [](const char* name) -> const char* {
        return std::string_view(name) == "MOSAIC_CUDA_DEVICE_ROUTE_PAIRS" ? value : nullptr;
      });
      QCOMPARE(o.device_route_pairs, given.device_route_pairs);
    }
  }

  void stepInputsDescribeEveryToken() {
    ModelSpec s = mixtral_like_spec(100, 64, 32, 2, 4);
    const std::vector<std::int64_t> prompt{1, 2, 3, 4, 5}, decode{7};
    const std::vector<std::int32_t> blocks_a{3, 9, 6}, blocks_b{4};
    StepBatch batch;
    batch.sequences = 2;
    batch.chunks.push_back({.sequence = 0, .target = 2, .buffer = 0, .tokens = prompt, .start = 12, .blocks = blocks_a, .emit = Emit::All});
    batch.chunks.push_back({.sequence = 1, .target = 1, .buffer = 1, .tokens = decode, .start = 3, .blocks = blocks_b, .emit = Emit::Last,
                            .draw_temperature = 0.7});
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
    // The prompt's rows return whole; the decode row is drawn from, at its temperature.
    QCOMPARE(in.temperature, (std::vector<double>{-1, -1, -1, -1, -1, 0.7}));
    QVERIFY(in.whole_rows() && in.draws());
    // cos/sin of position · frequency, the halves repeated.
    const std::size_t hd = static_cast<std::size_t>(s.head_dim);
    QVERIFY(std::abs(in.cos[2 * hd + 1] - std::cos(14.0f * inv[1])) < 1e-6f);
    QVERIFY(std::abs(in.sin[2 * hd + hd / 2 + 1] - std::sin(14.0f * inv[1])) < 1e-6f);
    // Packed: aligned, and the bytes round-trip.
    const cuda::PackedInputs p = cuda::pack(in);
    for (std::size_t off : {p.ids, p.rows, p.positions, p.block_offset, p.blocks, p.wanted, p.cos, p.sin, p.temperature})
      QCOMPARE(off % 256, std::size_t(0));
    QCOMPARE(reinterpret_cast<const std::int32_t*>(p.bytes.data() + p.positions)[4], 16);
    QCOMPARE(reinterpret_cast<const double*>(p.bytes.data() + p.temperature)[5], 0.7);
    QVERIFY(p.temperature + 6 * sizeof(double) <= p.bytes.size());
    // The prepared draws of 3 rows: normalisers, maxima and first maxima, then the keys (8-aligned),
    // copied back through the last row drawn at a temperature.
    const cuda::DrawLayout d = cuda::draw_layout(3, 512);
    QCOMPARE(d.normaliser, std::size_t(0));
    QCOMPARE(d.max_logit, std::size_t(3 * 8));
    QCOMPARE(d.first_max, d.max_logit + 3 * 4);
    QCOMPARE(d.keys, std::size_t(48));
    QCOMPARE(d.bytes, d.keys + 3 * 512 * 8);
    QCOMPARE(d.bytes_through(0), d.keys);
    QCOMPARE(d.bytes_through(2), d.keys + 2 * 512 * 8);
    QCOMPARE(in.sampled_rows(), std::int64_t(6));
    // A greedy draw needs no keys; a temperature out of range is refused.
    batch.chunks[1].draw_temperature = 0.0;
    QCOMPARE(cuda::step_inputs(batch, s, inv, 8).sampled_rows(), std::int64_t(0));
    batch.chunks[1].draw_temperature = -0.5;
    expect_mentions(error_of<InvalidArgument>([&] { cuda::step_inputs(batch, s, inv, 8); }), {"draw temperature", "positive"});
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

  void promptRunsMakeQueryTiles() {
    // A step as the backend lays it out: a 75-token prompt chunk after 20 cached positions, two decode
    // tokens, a 40-token prompt. Tiles of 32 that are one run of one sequence go to the tiled
    // attention; the tile where the chunks meet, and a whole decode step, stay token by token.
    ModelSpec s = mixtral_like_spec(100, 64, 32, 2, 4);
    const std::vector<std::int64_t> a(75, 1), one{2}, c(40, 3);
    const std::vector<std::int32_t> blocks_a{4, 0, 6, 2, 9, 7}, blocks_b{1}, blocks_c{3, 5, 8};
    StepBatch batch;
    batch.sequences = 4;
    batch.chunks.push_back({.sequence = 0, .tokens = a, .start = 20, .blocks = blocks_a});
    batch.chunks.push_back({.sequence = 1, .tokens = one, .start = 7, .blocks = blocks_b});
    batch.chunks.push_back({.sequence = 2, .tokens = one, .start = 3, .blocks = blocks_b});
    batch.chunks.push_back({.sequence = 3, .tokens = c, .start = 0, .blocks = blocks_c});
    const cuda::StepInputs in = cuda::step_inputs(batch, s, cuda::inverse_frequencies(s), 16);
    QCOMPARE(in.tokens, std::int64_t(117));
    const int T = static_cast<int>(in.tokens);
    std::vector<bool> tiles;
    for (int t = 0; t * kernels::kTileQueries < T; ++t) tiles.push_back(kernels::is_query_tile(in.positions.data(), in.block_offset.data(), T, t));
    // [0, 32) and [32, 64): the first prompt; [64, 96): its end, the decode tokens, the second's start;
    // [96, 117): the second prompt's last 21 tokens, a partial tile of one run.
    QCOMPARE(tiles, (std::vector<bool>{true, true, false, true}));
    // A run shorter than kMinTileQueries (the last 7 tokens) is not a tile; nor is a decode step.
    QVERIFY(!kernels::is_query_tile(in.positions.data(), in.block_offset.data(), 96 + kernels::kMinTileQueries - 1, 3));
    QVERIFY(kernels::is_query_tile(in.positions.data(), in.block_offset.data(), 96 + kernels::kMinTileQueries, 3));
    std::vector<std::int32_t> gap(in.positions.begin(), in.positions.end());
    gap[40] += 1;  // positions no longer consecutive
    QVERIFY(!kernels::is_query_tile(gap.data(), in.block_offset.data(), T, 1));
  }

  // The CUDA backend serves YaRN and Llama 3.1 rope scaling (host-computed frequencies, cos and sin
  // times YaRN's attention factor) and DeepSeek's architectures, and refuses, naming what it lacks,
  // what its kernels cannot hold.
  void scaledRopeAndWhatCudaRefuses() {
    ModelSpec s = mixtral_like_spec(100, 64, 32, 2, 4);
    QVERIFY(!cuda::cuda_unsupported(s));
    s.rope_scaling = {.kind = RopeKind::Yarn, .factor = 4, .original_max_positions = 64, .attention_factor = 1.25};
    const auto inv = cuda::inverse_frequencies(s);
    const auto exact = rope_inverse_frequencies(s);
    QCOMPARE(inv.size(), exact.size());
    for (std::size_t i = 0; i < inv.size(); ++i) QVERIFY(std::abs(inv[i] / exact[i] - 1) < 1e-6);
    QVERIFY(inv.back() < 1.0f / std::pow(static_cast<float>(s.rope_theta), 62.0f / 64.0f));  // the slow end interpolated
    const std::vector<std::int64_t> one{5};
    const std::vector<std::int32_t> blocks{0};
    StepBatch batch;
    batch.sequences = 1;
    batch.chunks.push_back({.sequence = 0, .target = 0, .buffer = 0, .tokens = one, .start = 3, .blocks = blocks, .emit = Emit::Last});
    const cuda::StepInputs in = cuda::step_inputs(batch, s, inv, 16);
    QVERIFY(std::abs(in.cos[0] - std::cos(3 * inv[0]) * 1.25f) < 1e-5 && std::abs(in.sin[1] - std::sin(3 * inv[1]) * 1.25f) < 1e-5);
    QVERIFY(!cuda::cuda_unsupported(s));
    // DeepSeek's latent attention, routers and ungated shared experts run; what their kernels cannot
    // hold is refused naming it.
    for (const std::string& config : {deepseek_v2_config(), deepseek_v3_config()}) {
      ModelSpec deepseek = parse_model_spec(config, "config.json");
      QVERIFY2(!cuda::cuda_unsupported(deepseek), cuda::cuda_unsupported(deepseek).value_or("").c_str());
      QCOMPARE(cuda::inverse_frequencies(deepseek).size(), std::size_t(deepseek.mla->rope_dim / 2));  // the rotary part's, not head_dim's
      deepseek.mla->kv_lora_rank = 1024;
      deepseek.num_experts = 512;
      deepseek.n_group = 64;
      const auto why = cuda::cuda_unsupported(deepseek);
      QVERIFY(why.has_value());
      expect_mentions(*why, {"deepseek_v", "latent attention rows wider than 576", "more than 256 experts", "expert groups"});
    }
    ModelSpec pairs = mixtral_like_spec(100, 64, 32, 2, 4);
    pairs.rope_interleaved = true;
    expect_mentions(cuda::cuda_unsupported(pairs).value_or(""), {"interleaved rotary pairs outside latent attention"});
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

  void deltaGroupsBundleOverTheirBase() {
    // Wave 0: slot 0 holds base expert A, slot 1 a delta over A, slot 2 dense expert B, and scratch
    // slot 0 is loaded with another delta over A; wave 1 reloads scratch 0 with dense expert C.
    // Expert ids: 10 = A, 11 and 13 = deltas over A, 12 = B, 14 = C.
    const std::map<std::int32_t, cuda::SlotServes> experts{{10, {{1, 2, 3}, false}}, {11, {{1, 2, 3}, true}}, {12, {{4, 5, 6}, false}},
                                                           {13, {{1, 2, 3}, true}}, {14, {{7, 8, 9}, false}}};
    const std::map<std::pair<bool, std::int32_t>, std::int32_t> held{{{false, 0}, 10}, {{false, 1}, 11}, {{false, 2}, 12}, {{true, 0}, 12}};
    std::vector<std::int32_t> asked;  // the loaded ids the plan passed
    const cuda::ServesOf serves = [&](SlotRef s, std::int32_t loaded) {
      asked.push_back(loaded);
      return experts.at(loaded >= 0 ? loaded : held.at({s.scratch, s.slot}));
    };
    RoutePlan plan;
    plan.outcome.assign(10, PairOutcome::Hit);
    plan.waves.resize(2);
    plan.waves[0].groups = {{{false, 1}, {2}}, {{false, 2}, {3, 5}}, {{false, 0}, {0, 1}}, {{true, 0}, {4, 6}}};
    plan.waves[0].loads = {{{true, 0}, 13, {}, 4}};
    plan.waves[1].groups = {{{true, 0}, {7}}, {{false, 1}, {8, 9}}};
    plan.waves[1].loads = {{{true, 0}, 14, {}, 7}};
    const cuda::GroupedPlan g = cuda::grouped_plan(plan, 16, serves);
    QCOMPARE(asked, (std::vector<std::int32_t>{-1, -1, -1, 13, 14, -1}));

    const cuda::PlannedWave& w0 = g.waves[0];
    QCOMPARE(w0.small.size(), std::size_t(1));  // B alone: no delta goes over it
    QVERIFY(w0.small[0].slot == (SlotRef{false, 2}));
    QCOMPARE(w0.bundles.size(), std::size_t(1));
    const cuda::PlannedBundle& b = w0.bundles[0];
    QCOMPARE(b.groups.size(), std::size_t(3));  // A's three slots in wave order, positions end to end
    QVERIFY(b.groups[0].slot == (SlotRef{false, 1}) && b.groups[0].delta);
    QVERIFY(b.groups[1].slot == (SlotRef{false, 0}) && !b.groups[1].delta);
    QVERIFY(b.groups[2].slot == (SlotRef{true, 0}) && b.groups[2].delta);
    QCOMPARE(b.begin, w0.small[0].end);
    QCOMPARE(b.groups.front().begin, b.begin);
    for (std::size_t i = 1; i < b.groups.size(); ++i) QCOMPARE(b.groups[i].begin, b.groups[i - 1].end);
    QCOMPARE(b.end, b.groups.back().end);
    QCOMPARE(b.end - b.begin, 5);

    // Wave 1: scratch 0 now holds C, so it runs alone; slot 1's delta over A bundles by itself.
    const cuda::PlannedWave& w1 = g.waves[1];
    QCOMPARE(w1.small.size(), std::size_t(1));
    QVERIFY(w1.small[0].slot == (SlotRef{true, 0}) && !w1.small[0].delta);
    QCOMPARE(w1.bundles.size(), std::size_t(1));
    QCOMPARE(w1.bundles[0].groups.size(), std::size_t(1));
    QCOMPARE(w1.bundles[0].end - w1.bundles[0].begin, 2);
    for (std::size_t p = 0; p < g.pos_of.size(); ++p) QCOMPARE(g.pair_at[static_cast<std::size_t>(g.pos_of[p])], std::int32_t(p));

    // Without deltas nothing bundles, whatever shares matrices.
    const cuda::GroupedPlan plain = cuda::grouped_plan(plan, 16);
    QVERIFY(plain.waves[0].bundles.empty() && plain.waves[0].small.size() == 4);
  }

  void deltaBlocksReadAsTheirPackedArrays() {
    // Gate, up and down of one expert in one block, each array 256-byte aligned; the kernel reading
    // the block's views gives the products it gives from the packed arrays themselves.
    const std::int64_t hidden = 64, inter = 40;
    for (const DeltaFormat& f : {DeltaFormat{4, true, 32}, DeltaFormat{2, false, 16}}) {
      HostDelta d{f, {}, {}, {}};
      unsigned seed = 1;
      for (PackedDelta* p : {&d.gate, &d.up, &d.down}) {
        const bool down = p == &d.down;
        const std::int64_t rows = down ? hidden : inter, cols = down ? inter : hidden;
        *p = compress_delta(normal_values(static_cast<std::size_t>(rows * cols), seed++, 0.01f), rows, cols, f);
      }
      const cuda::DeltaBlock b = cuda::delta_block(d);
      QVERIFY(b.bytes >= d.bytes() && b.bytes % 256 == 0);
      std::vector<std::uint64_t> storage(b.bytes / 8 + 1, ~0ull);  // stale bytes: the write clears its gaps
      auto* at = reinterpret_cast<std::byte*>(storage.data());
      cuda::write_delta_block(d, b, at);
      const auto views = cuda::delta_block_views(d, b, at);
      int i = 0;
      for (const PackedDelta* p : {&d.gate, &d.up, &d.down}) {
        const auto& m = b.part[static_cast<std::size_t>(i)];
        for (std::size_t off : {m.qweight, m.meta, m.scales, m.zeros}) QCOMPARE(off % 256, std::size_t(0));
        QCOMPARE(views[static_cast<std::size_t>(i)].meta == nullptr, !f.sparse24);
        const int n = 3;
        const auto x = normal_values(static_cast<std::size_t>(n * p->cols), 40u + static_cast<unsigned>(i));
        std::vector<float> want(static_cast<std::size_t>(n * p->rows)), got(want.size());
        kernels::delta_linear_reference(x.data(), n, delta_view(*p, f), false, want.data());
        kernels::delta_linear_reference(x.data(), n, views[static_cast<std::size_t>(i)], false, got.data());
        QCOMPARE(got, want);
        QVERIFY(std::any_of(want.begin(), want.end(), [](float v) { return v != 0.0f; }));
        ++i;
      }
    }
  }

  // The virtual weight tensor's pages, as ExpertWeave's Figure 3 draws them: experts of 1.5 pages
  // end to end, a page two neighbours share mapped while either holds an expert.
  void pagesAreMappedOnlyUnderOccupiedSlots() {
    constexpr std::uint64_t MiB = 1 << 20;
    PageMap map(3 * MiB, 8, 2 * MiB);
    QCOMPARE(map.pages(), std::int64_t(12));
    QCOMPARE(map.reserved_bytes(), 24 * MiB);
    QCOMPARE(map.first_page(1), std::int64_t(1));
    QCOMPARE(map.last_page(1), std::int64_t(2));
    QCOMPARE(map.occupy(0), (std::vector<std::int64_t>{0, 1}));
    QCOMPARE(map.occupy(1), (std::vector<std::int64_t>{2}));  // page 1 is mapped already
    QCOMPARE(map.references(1), 2);
    QVERIFY(map.occupy(1).empty());  // occupied already: nothing more
    QCOMPARE(map.occupy(5), (std::vector<std::int64_t>{7, 8}));
    QCOMPARE(map.mapped_pages(), std::int64_t(5));  // 10 MiB for 9 MiB of experts, not 24
    QCOMPARE(map.vacate(0), (std::vector<std::int64_t>{0}));  // page 1 still holds slot 1's start
    QVERIFY(map.vacate(0).empty());
    QCOMPARE(map.vacate(1), (std::vector<std::int64_t>{1, 2}));
    QCOMPARE(map.mapped_pages(), std::int64_t(2));
    expect_mentions(error_of<InvalidArgument>([&] { map.occupy(8); }), {"slot 8", "8 slots"});
    expect_mentions(error_of<InvalidArgument>([&] { PageMap(0, 4, 2 * MiB); }), {"virtual weight tensor"});

    // Any sequence: the pages mapped are exactly those some occupied slot lies on, and what each
    // call says to map or unmap keeps the backend's view equal to that.
    for (const std::uint64_t slot : std::initializer_list<std::uint64_t>{3 * MiB, 2 * MiB, 5 * MiB / 4, 69206016, 7 * MiB + 12345}) {
      PageMap m(slot, 13, 2 * MiB);
      std::vector<bool> mapped(static_cast<std::size_t>(m.pages()), false);
      std::uint64_t state = 42;
      for (int op = 0; op < 2000; ++op) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const auto s = static_cast<std::int64_t>((state >> 33) % 13);
        const bool in = (state >> 20) & 1;
        for (std::int64_t p : in ? m.occupy(s) : m.vacate(s)) {
          QCOMPARE(bool(mapped[static_cast<std::size_t>(p)]), !in);  // never mapped twice, never unmapped unmapped
          mapped[static_cast<std::size_t>(p)] = in;
        }
        for (std::int64_t p = 0; p < m.pages(); ++p) {
          bool under = false;
          for (std::int64_t t = 0; t < m.slots(); ++t)
            under |= m.occupied(t) && m.slot_offset(t) < (p + 1) * 2 * MiB && m.slot_offset(t) + slot > p * 2 * MiB;
          QCOMPARE(bool(mapped[static_cast<std::size_t>(p)]), under);
        }
      }
    }
  }

  void pagesComeBackToThePool() {
    PagePool pool(3);
    for (std::int64_t id = 0; id < 3; ++id) {
      const auto page = pool.acquire();
      QVERIFY(page && page->id == id && page->fresh);
    }
    QVERIFY(!pool.acquire());  // the budget's pages are all in use
    pool.release(1);
    QCOMPARE(pool.in_use(), std::int64_t(2));
    const auto again = pool.acquire();
    QVERIFY(again && again->id == 1 && !again->fresh);  // reused, not created
    QCOMPARE(pool.created(), std::int64_t(3));
    pool.release(1);
    expect_mentions(error_of<InvalidArgument>([&] { pool.release(1); }), {"page 1", "not in use"});
    expect_mentions(error_of<InvalidArgument>([&] { pool.release(7); }), {"page 7"});
  }
};

QTEST_GUILESS_MAIN(TestCudaPlan)
#include "tst_cuda_plan.moc"
