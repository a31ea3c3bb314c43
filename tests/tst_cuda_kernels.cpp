// Every CUDA kernel against its CPU reference on fresh random inputs: odd sizes, the scalar and the
// vector paths, ragged and empty expert groups, pairs no slot serves, paged KV in shuffled blocks.
// Label `gpu`: exits 77 without a device.
#include <QTest>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gpu_suite.h"
#include "kernels/delta_linear.h"
#include "kernels/latent_attention.h"
#include "kernels/launch.h"
#include "kernels/linear.h"
#include "kernels/moe_experts.h"
#include "kernels/paged_attention.h"
#include "kernels/router_topk.h"
#include "kernels/token_candidates.h"
#include "kernels/transformer_ops.h"

using namespace mosaic::kernels;

// Named, not anonymous: the cases' local structs hold Devs, and GCC warns of a member whose type
// has internal linkage (-Wsubobject-linkage).
namespace kernels_suite {

// A device copy of a host vector, and back.
template <class T>
struct Dev {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Dev(const std::vector<T>& v) : n(v.size()) {
    cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T));
    if (n) cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  explicit Dev(std::size_t count) : n(count) {
    cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T));
    cudaMemset(p, 0, std::max<std::size_t>(1, n) * sizeof(T));
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    if (n) cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

// What a routing launch writes (route_cuda, norm_route_cuda, or the launches they fuse), for P pairs
// over `slots` slots; h: norm_route_cuda's normalized rows.
struct Routed {
  Dev<float> h, logits, w;
  Dev<std::int32_t> ids, scratch, pair_at, pos_of;
  Dev<int> groups, misses, begin, end;
  Dev<const bf16_t*> wptr;
  Routed(const std::vector<float>& logits0, std::size_t h_floats, std::size_t P, int slots)
      : h(h_floats), logits(logits0), w(P), ids(P), scratch(2 * std::size_t(slots)), pair_at(P), pos_of(P), groups(1), misses(1),
        begin(P), end(P), wptr(P) {}
  GroupedPairs g() { return {groups.p, begin.p, end.p, wptr.p, pair_at.p, pos_of.p, misses.p}; }
};

// One MoE layer's pairs on the device, grouped by reroute_cuda through `table` over `slots` slots of
// 3 · inter · hidden bf16 weights each, and the buffers the expert kernels fill.
struct GroupedLayer {
  int tokens, k, hidden, inter, slots, max_groups;
  std::size_t P;
  Dev<std::int32_t> ids, rows, table, scratch;
  Dev<bf16_t> weights_of_slots;
  Dev<float> x, residual, weights;
  Dev<int> groups, misses, begin, end;
  Dev<std::int32_t> pair_at, pos_of;
  Dev<const bf16_t*> wptr;
  Dev<float> act, out;
  GroupedLayer(const std::vector<std::int32_t>& ids_, const std::vector<std::int32_t>& rows_, const std::vector<std::int32_t>& table_,
               int experts, int slots_, const std::vector<bf16_t>& slot_w, const std::vector<float>& x_, const std::vector<float>& residual_,
               const std::vector<float>& weights_, int hidden_, int inter_)
      : tokens(int(rows_.size())), k(int(ids_.size() / rows_.size())), hidden(hidden_), inter(inter_), slots(slots_),
        max_groups(std::min<int>(int(ids_.size()), slots_)), P(ids_.size()), ids(ids_), rows(rows_), table(table_),
        scratch(2 * std::size_t(slots_) + 1), weights_of_slots(slot_w), x(x_), residual(residual_), weights(weights_), groups(1), misses(1),
        begin(P + 1), end(P + 1), pair_at(P + 1), pos_of(P + 1), wptr(P + 1), act(P * std::size_t(inter_)), out(P * std::size_t(hidden_)) {
    reroute = reroute_cuda(ids.p, rows.p, tokens, k, table.p, experts, slots, weights_of_slots.p, 3LL * inter * hidden, scratch.p, g(), nullptr);
  }
  GroupedPairs g() { return {groups.p, begin.p, end.p, wptr.p, pair_at.p, pos_of.p, misses.p}; }
  int reroute = 0;  // what the reroute launch returned
};
}  // namespace kernels_suite

namespace {

using kernels_suite::Dev;
using kernels_suite::GroupedLayer;
using kernels_suite::Routed;

std::mt19937 rng(1234);
std::vector<float> randn(std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
std::vector<bf16_t> randn_bf16(std::size_t n, float scale = 1.0f, float mean = 0.0f) {
  std::vector<bf16_t> v;
  for (float x : randn(n, scale)) v.push_back(float_to_bf16(mean + x));
  return v;
}

// A routing table of 3 targets over `experts` (slots shared, skipped and missing; target 2 with
// nothing resident) and each of `tokens` tokens' target.
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> routing_of(int tokens, int experts, int slots) {
  const int targets = 3;
  std::vector<std::int32_t> table(std::size_t(targets) * experts);
  std::uniform_int_distribution<int> pick(-3, slots - 1);
  for (auto& s : table) s = std::max(-1, pick(rng));
  std::fill(table.begin() + 2 * experts, table.end(), -1);
  std::vector<std::int32_t> rows(static_cast<std::size_t>(tokens));
  for (auto& r : rows) r = int(rng() % targets);
  return {table, rows};
}

// Each token's table row (one of `targets`) and k distinct experts, the j-th weighted first + 0.2 j.
struct DrawnRoutes {
  std::vector<std::int32_t> rows, ids;
  std::vector<float> weights;
};
DrawnRoutes draw_routes(int tokens, int k, int experts, int targets, float first) {
  DrawnRoutes d{std::vector<std::int32_t>(static_cast<std::size_t>(tokens)), std::vector<std::int32_t>(std::size_t(tokens) * k),
                std::vector<float>(std::size_t(tokens) * k)};
  for (int t = 0; t < tokens; ++t) {
    d.rows[std::size_t(t)] = int(rng() % targets);
    std::vector<int> e(experts);
    std::iota(e.begin(), e.end(), 0);
    std::shuffle(e.begin(), e.end(), rng);
    for (int j = 0; j < k; ++j) {
      d.ids[std::size_t(t * k + j)] = e[std::size_t(j)];
      d.weights[std::size_t(t * k + j)] = first + 0.2f * float(j);
    }
  }
  return d;
}

// A MoE layer's slots (gate and up, then down, each slot 3 · inter · hidden bf16), its tokens' rows
// and the residual they are added to.
struct DrawnLayer {
  std::vector<bf16_t> slots;
  std::vector<float> x, residual;
};
DrawnLayer draw_layer(int slots, int tokens, int hidden, int inter) {
  DrawnLayer d;
  d.slots = randn_bf16(std::size_t(slots) * 3 * std::size_t(inter) * std::size_t(hidden), 0.05f);
  d.x = randn(std::size_t(tokens) * hidden);
  d.residual = randn(std::size_t(tokens) * hidden);
  return d;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

#define CHECK_LAUNCH(call) QCOMPARE(int(call), 0)
#define SYNCED() QCOMPARE(int(cudaDeviceSynchronize()), 0)

}  // namespace

class TestCudaKernels : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void linearMatchesReference() {
    for (int n : {1, 2, 3, 5, 8, 13})
      for (int in : {64, 72, 37})
        for (int out : {1, 33, 100})
          for (bool bias : {false, true})
            for (bool acc : {false, true}) {
              const auto x = randn(std::size_t(n) * in), y0 = randn(std::size_t(n) * out);
              const auto w = randn_bf16(std::size_t(out) * in, 0.1f), b = randn_bf16(std::size_t(out));
              Dev<float> dx(x), dy(y0);
              Dev<bf16_t> dw(w), db(b);
              CHECK_LAUNCH(linear_cuda(dx.p, n, in, dw.p, out, bias ? db.p : nullptr, acc, dy.p, nullptr));
              SYNCED();
              std::vector<float> expect = y0;
              linear_reference(x.data(), n, in, w.data(), out, bias ? b.data() : nullptr, acc, expect.data());
              const double e = rel(dy.get(), expect);
              QVERIFY2(e < 1e-5, qPrintable(QStringLiteral("n=%1 in=%2 out=%3: %4").arg(n).arg(in).arg(out).arg(e)));
            }
  }

  void deltaLinearMatchesReference() {
    // Random packs of every format: any code, 2:4 place and zero is a valid input to the product,
    // and f16 scales drawn as normal numbers of moderate size. 1, 2, 3 and 11 tokens take each of the
    // tiles kernel's token chunks (1, 2, 4, 8), 11 crossing the chunk of 8; groups of 48 split a
    // 2-bit word between groups; accumulate adds onto y. Both kernels where the tiles fit: 2336
    // columns are two whole tiles of 1024 and a part (288); 33 and 70 rows leave part of a block's
    // rows empty; 96 × 32 fits too. 4301 and 8501 rows take two and four rows a warp (a grid of at
    // least 2 blocks an SM, simt's 132 SMs), their last warp's rows part past the matrix: one token,
    // and 8501 three too, in one format (simt's time).
    std::uniform_int_distribution<std::uint32_t> word;
    int tiled = 0;
    for (int bits : {4, 2})
      for (bool sparse : {true, false})
        for (auto [rows, cols, group] : {std::tuple<int, int, int>{33, 256, 128}, {7, 96, 32}, {64, 192, 48}, {70, 2336, 64}, {4301, 64, 32}, {8501, 64, 32}})
          for (int n : {1, 2, 3, 11}) {
            if (rows > 1000 && (bits != 4 || !sparse || !(n == 1 || (rows == 8501 && n == 3)))) continue;
            const int per = 32 / bits, kept = sparse ? cols / 2 : cols;
            const int vw = (kept + per - 1) / per, mw = sparse ? (kept + 15) / 16 : 0, groups = (cols + group - 1) / group;
            std::vector<std::uint32_t> q(static_cast<std::size_t>(rows) * vw), meta(static_cast<std::size_t>(rows) * mw);
            for (auto& v : q) v = word(rng);
            for (auto& v : meta) v = word(rng);
            std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows) * groups);
            for (auto& h : scales) h = static_cast<std::uint16_t>(((word(rng) & 1u) << 15) | ((8u + word(rng) % 6u) << 10) | (word(rng) & 0x3ffu));
            std::vector<std::uint8_t> zeros(scales.size());
            for (auto& z : zeros) z = static_cast<std::uint8_t>(word(rng) & ((1u << bits) - 1));
            const std::vector<float> x = randn(static_cast<std::size_t>(n) * cols);
            const int ldy = rows + 5;
            const std::vector<float> y0 = randn(static_cast<std::size_t>(n) * ldy);
            DeltaView host{.qweight = q.data(), .meta = sparse ? meta.data() : nullptr, .scales = scales.data(), .zeros = zeros.data(),
                           .rows = rows, .cols = cols, .group = group, .bits = bits, .sparse24 = sparse};
            Dev<std::uint32_t> dq(q), dm(meta);
            Dev<std::uint16_t> ds(scales);
            Dev<std::uint8_t> dz(zeros);
            Dev<float> dx(x);
            DeltaView dev = host;
            dev.qweight = dq.p;
            dev.meta = sparse ? dm.p : nullptr;
            dev.scales = ds.p;
            dev.zeros = dz.p;
            const bool fits = delta_tiles_fit(dev);
            QCOMPARE(fits, cols % 32 == 0 && group % 32 == 0);
            tiled += fits;
            if (fits && !(bits == 2 && sparse)) {  // a lane's codes are 2 or 4 words: their vector load wants them aligned
              DeltaView off = dev;
              off.qweight += 1;
              QVERIFY(!delta_tiles_fit(off));
            }
            for (const DeltaKernel kernel : {DeltaKernel::rows, DeltaKernel::tiles})
              for (bool accumulate : {false, true}) {
                Dev<float> dy(y0);
                if (kernel == DeltaKernel::tiles && !fits) {  // refused, nothing written
                  QCOMPARE(delta_linear_cuda(dx.p, n, dev, accumulate, dy.p, ldy, nullptr, kernel), int(cudaErrorInvalidValue));
                  QCOMPARE(dy.get(), y0);
                  continue;
                }
                std::vector<float> want = y0;
                delta_linear_reference(x.data(), n, host, accumulate, want.data(), ldy);
                CHECK_LAUNCH(delta_linear_cuda(dx.p, n, dev, accumulate, dy.p, ldy, nullptr, kernel));
                SYNCED();
                const double err = rel(dy.get(), want);
                QVERIFY2(err < 1e-5, qPrintable(QStringLiteral("%1 kernel, %2-bit %3, %4×%5 group %6, n %7, accumulate %8: %9")
                                                    .arg(kernel == DeltaKernel::rows ? QStringLiteral("rows") : QStringLiteral("tiles"))
                                                    .arg(bits).arg(sparse ? QStringLiteral("2:4") : QStringLiteral("dense")).arg(rows).arg(cols).arg(group).arg(n).arg(accumulate).arg(err)));
              }
          }
    QCOMPARE(tiled, 4 * 3 * 4 + 3);  // 33 × 256, 7 × 96 and 70 × 2336 in each format at each n; the tall ones
  }

  void rowOpsMatchReference() {
    const int rows = 7, width = 300, heads = 3, hd = 16;
    const auto x = randn(std::size_t(rows) * width);
    const auto w = randn_bf16(std::size_t(width), 0.1f, 1.0f);
    {
      Dev<float> dx(x), dout(x.size());
      Dev<bf16_t> dw(w);
      CHECK_LAUNCH(rms_norm_cuda(dx.p, dw.p, rows, width, 1e-6f, dout.p, nullptr));
      SYNCED();
      std::vector<float> expect(x.size());
      rms_norm_reference(x.data(), w.data(), rows, width, 1e-6f, expect.data());
      QVERIFY(rel(dout.get(), expect) < 1e-5);
    }
    {
      const auto q = randn(std::size_t(rows) * heads * hd), cs = randn(std::size_t(rows) * hd), sn = randn(std::size_t(rows) * hd);
      Dev<float> dq(q), dc(cs), ds(sn);
      CHECK_LAUNCH(rope_cuda(dq.p, dc.p, ds.p, rows, heads, hd, nullptr));
      SYNCED();
      std::vector<float> expect = q;
      rope_reference(expect.data(), cs.data(), sn.data(), rows, heads, hd);
      QVERIFY(rel(dq.get(), expect) < 1e-6);
    }
    {
      const auto gu = randn(std::size_t(rows) * 2 * width), up = randn(std::size_t(rows) * width);
      for (bool stacked : {true, false}) {
        Dev<float> dg(gu), du(up), dout(std::size_t(rows) * width);
        CHECK_LAUNCH(silu_mul_cuda(dg.p, stacked ? nullptr : du.p, rows, width, dout.p, nullptr));
        SYNCED();
        std::vector<float> expect(std::size_t(rows) * width);
        silu_mul_reference(gu.data(), stacked ? nullptr : up.data(), rows, width, expect.data());
        QVERIFY(rel(dout.get(), expect) < 1e-5);
      }
    }
    {
      const auto y = randn(x.size()), gate = randn(std::size_t(rows));
      for (bool gated : {true, false}) {
        Dev<float> dx(x), dy(y), dg(gate);
        CHECK_LAUNCH(add_gated_cuda(dx.p, dy.p, gated ? dg.p : nullptr, rows, width, nullptr));
        CHECK_LAUNCH(clamp_cuda(dx.p, std::int64_t(x.size()), 0.5f, nullptr));
        SYNCED();
        std::vector<float> expect = x;
        add_gated_reference(expect.data(), y.data(), gated ? gate.data() : nullptr, rows, width);
        clamp_reference(expect.data(), std::int64_t(expect.size()), 0.5f);
        QVERIFY(rel(dx.get(), expect) < 1e-5);
      }
    }
    {
      const std::vector<std::int32_t> ids{4, 0, 4, 9};
      const auto table = randn_bf16(10 * std::size_t(width));
      Dev<bf16_t> dt(table);
      Dev<std::int32_t> di(ids);
      Dev<float> dout(ids.size() * width);
      CHECK_LAUNCH(embed_rows_cuda(dt.p, di.p, int(ids.size()), width, dout.p, nullptr));
      Dev<bf16_t> narrow(x.size());
      Dev<float> dx(x);
      CHECK_LAUNCH(float_to_bf16_cuda(dx.p, std::int64_t(x.size()), narrow.p, nullptr));
      Dev<float> gathered(ids.size() * width);
      const std::vector<std::int32_t> rows_of{6, 0, 3, 3};
      Dev<std::int32_t> dr(rows_of);
      CHECK_LAUNCH(gather_rows_cuda(dx.p, width, dr.p, 4, 1, gathered.p, nullptr));
      Dev<float> by_pair(ids.size() * width);  // pairs 6, 0, 3, 3 of top-2 routing: tokens 3, 0, 1, 1
      CHECK_LAUNCH(gather_rows_cuda(dx.p, width, dr.p, 4, 2, by_pair.p, nullptr));
      SYNCED();
      std::vector<float> expect(ids.size() * width);
      embed_rows_reference(table.data(), ids.data(), int(ids.size()), width, expect.data());
      QCOMPARE(dout.get(), expect);
      const auto got = narrow.get();
      for (std::size_t i = 0; i < x.size(); ++i) QCOMPARE(got[i], float_to_bf16(x[i]));
      // And back: bf16 words widened to fp32 exactly (a tensor the backend holds in fp32).
      Dev<float> wide(x.size());
      CHECK_LAUNCH(widen_to_float_cuda(narrow.p, std::int64_t(x.size()), false, wide.p, nullptr));
      SYNCED();
      const auto widened = wide.get();
      for (std::size_t i = 0; i < x.size(); ++i) QCOMPARE(widened[i], bf16_to_float(got[i]));
      const auto g = gathered.get();
      const auto gp = by_pair.get();
      for (int r = 0; r < 4; ++r) {
        QCOMPARE(g[std::size_t(r) * width + 5], x[std::size_t(rows_of[std::size_t(r)]) * width + 5]);
        QCOMPARE(gp[std::size_t(r) * width + 5], x[std::size_t(rows_of[std::size_t(r)] / 2) * width + 5]);
      }
    }
  }

  // SwapMoE's importance of a step: every pair's ‖h‖ · g added at its row and expert, onto what the
  // scores held (pairs with id −1 add nothing); repeated experts sum atomically. Odd hidden sizes,
  // one token, and k as large as DeepSeek-V3's 8.
  void importanceAddMatchesReference() {
    for (const auto& [tokens, hidden, k, experts] :
         std::vector<std::tuple<int, int, int, int>>{{1, 64, 2, 8}, {13, 333, 2, 8}, {40, 1000, 8, 64}, {7, 31, 6, 16}}) {
      const auto h = randn(std::size_t(tokens) * hidden);
      std::vector<std::int32_t> ids(std::size_t(tokens) * k), rows(static_cast<std::size_t>(tokens));
      std::vector<float> w(ids.size());
      std::mt19937 pick(std::uint32_t(tokens * 31 + k));
      for (std::size_t i = 0; i < ids.size(); ++i) {
        ids[i] = i % 5 == 4 ? -1 : std::int32_t(pick() % std::uint32_t(experts));
        w[i] = float(pick() % 1000) / 1000.0f;
      }
      for (int t = 0; t < tokens; ++t) rows[std::size_t(t)] = t % 3;
      std::vector<float> scores(std::size_t(3) * experts);
      for (std::size_t i = 0; i < scores.size(); ++i) scores[i] = float(i % 7);  // accumulated onto
      Dev<float> dh(h), dw(w), ds(scores);
      Dev<std::int32_t> di(ids), dr(rows);
      CHECK_LAUNCH(importance_add_cuda(dh.p, hidden, tokens, k, di.p, dw.p, dr.p, experts, ds.p, nullptr));
      SYNCED();
      importance_add_reference(h.data(), hidden, tokens, k, ids.data(), w.data(), rows.data(), experts, scores.data());
      QVERIFY2(rel(ds.get(), scores) < 1e-5, qPrintable(QStringLiteral("%1 tokens, k %2").arg(tokens).arg(k)));
    }
    QCOMPARE(importance_add_cuda(nullptr, 8, 1, 0, nullptr, nullptr, nullptr, 8, nullptr, nullptr), int(cudaErrorInvalidValue));
  }

  void maskedRouterMatchesReference() {
    const int tokens = 9, experts = 12, k = 3;
    auto logits = randn(std::size_t(tokens) * experts, 2.0f);
    std::vector<std::int32_t> table(2 * experts, -1), rows(tokens);
    for (int e = 0; e < experts; ++e) table[std::size_t(e)] = e % 3 ? e : -1;  // row 0: some resident
    for (int t = 0; t < tokens; ++t) rows[std::size_t(t)] = t % 2;             // row 1: none resident
    Dev<float> dl(logits), dw(std::size_t(tokens) * k);
    Dev<std::int32_t> dt(table), dr(rows), di(std::size_t(tokens) * k);
    CHECK_LAUNCH(mask_router_cuda(dl.p, dr.p, dt.p, tokens, experts, nullptr));
    CHECK_LAUNCH(router_topk_cuda(dl.p, tokens, experts, k, true, di.p, dw.p, nullptr));
    SYNCED();
    mask_router_reference(logits.data(), rows.data(), table.data(), tokens, experts);
    std::vector<std::int32_t> ids(std::size_t(tokens) * k);
    std::vector<float> w(ids.size());
    router_topk_reference(logits.data(), tokens, experts, k, true, ids.data(), w.data());
    QCOMPARE(di.get(), ids);
    QVERIFY(rel(dw.get(), w) < 1e-5);
    for (int t = 0; t < tokens; t += 2)
      for (int j = 0; j < k; ++j) QVERIFY(table[std::size_t(ids[std::size_t(t * k + j)])] >= 0);
  }

  // The draw's candidates: exactly the reference's first maximum, keys and order (ties at the last
  // place to the lower index), the normaliser to double rounding; rows at temperature < 0 untouched.
  void tokenCandidatesMatchReference_data() {
    QTest::addColumn<int>("vocab");
    QTest::addColumn<int>("candidates");
    QTest::newRow("tiny vocabulary, more candidates than tokens") << 5 << 16;
    QTest::newRow("odd vocabulary, one candidate") << 1001 << 1;
    QTest::newRow("32k, the backend's 512") << 32000 << 512;
    QTest::newRow("152k, the most") << 152064 << kMaxCandidates;
  }
  void tokenCandidatesMatchReference() {
    QFETCH(int, vocab);
    QFETCH(int, candidates);
    const std::vector<double> temperature{0.7, -1.0, 0.0, 2.0, 0.7, 1.0, 0.3, 0.9};
    const int rows = int(temperature.size());
    std::vector<float> logits = randn(std::size_t(rows) * vocab, 3.0f);
    const auto row = [&](int r) { return logits.begin() + std::ptrdiff_t(r) * vocab; };
    std::transform(row(4), row(5), row(4), [](float x) { return std::round(x * 2.0f) / 2.0f; });  // many ties
    std::fill(row(5), row(6), 1.5f);                                                               // all tied
    for (int i = 0; i < vocab; i += 3) row(6)[i] = -INFINITY;                                      // banned tokens
    row(7)[vocab / 2] = NAN;  // ignored by the maximum, first among the keys; the normaliser NaN
    row(7)[vocab - 1] = -NAN;
    row(0)[vocab / 2] = -0.0f;
    row(0)[vocab / 3] = 0.0f;
    const std::size_t keys = std::size_t(rows) * candidates;
    const std::int32_t kUntouched = -7;
    Dev<float> dl(logits), dm(std::vector<float>(std::size_t(rows), -7.0f));
    Dev<double> dt(temperature), dn(std::vector<double>(std::size_t(rows), -7.0));
    Dev<std::int32_t> df(std::vector<std::int32_t>(std::size_t(rows), kUntouched));
    Dev<std::uint64_t> dk(std::vector<std::uint64_t>(keys, 7));
    CHECK_LAUNCH(token_candidates_cuda(dl.p, rows, vocab, dt.p, candidates, df.p, dm.p, dn.p, dk.p, nullptr));
    SYNCED();
    std::vector<std::int32_t> first(std::size_t(rows), kUntouched);
    std::vector<float> top(std::size_t(rows), -7.0f);
    std::vector<double> norm(std::size_t(rows), -7.0);
    std::vector<std::uint64_t> key(keys, 7);
    token_candidates_reference(logits.data(), rows, vocab, temperature.data(), candidates, first.data(), top.data(), norm.data(), key.data());
    QCOMPARE(df.get(), first);
    QCOMPARE(dm.get(), top);
    QCOMPARE(dk.get(), key);
    const std::vector<double> got = dn.get();
    for (int r = 0; r < rows; ++r)
      QVERIFY2(got[std::size_t(r)] == norm[std::size_t(r)] || (std::isnan(got[std::size_t(r)]) && std::isnan(norm[std::size_t(r)])) ||
                   std::abs(got[std::size_t(r)] - norm[std::size_t(r)]) < 1e-12 * norm[std::size_t(r)],
               qPrintable(QString::asprintf("row %d: %.17g against %.17g", r, got[std::size_t(r)], norm[std::size_t(r)])));
    QCOMPARE(first[1], kUntouched);  // the row wanted whole
  }

  void routerSurvivesNanLogits() {
    // A NaN logit is the lowest value: every id is an expert of the row, never one past the end.
    const int tokens = 3, experts = 256, k = 8;
    std::vector<float> logits = randn(std::size_t(tokens) * experts);
    for (int e = 0; e < experts; ++e) logits[std::size_t(e)] = NAN;  // a row of NaN
    logits[std::size_t(experts) + 7] = NAN;
    Dev<float> dl(logits), dw(std::size_t(tokens) * k);
    Dev<std::int32_t> di(std::size_t(tokens) * k);
    CHECK_LAUNCH(router_topk_cuda(dl.p, tokens, experts, k, true, di.p, dw.p, nullptr));
    SYNCED();
    std::vector<std::int32_t> ids(std::size_t(tokens) * k);
    std::vector<float> w(ids.size());
    router_topk_reference(logits.data(), tokens, experts, k, true, ids.data(), w.data());
    QCOMPARE(di.get(), ids);
    for (std::int32_t id : di.get()) QVERIFY(id >= 0 && id < experts);
    for (int j = 0; j < k; ++j) QVERIFY(ids[std::size_t(k + j)] != 7);
  }

  void deepseekRoutersMatchReference_data() {
    QTest::addColumn<int>("experts");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("scores");  // RouterScores
    QTest::addColumn<int>("groups");  // GroupRank
    QTest::addColumn<int>("n_group");
    QTest::addColumn<int>("topk_group");
    QTest::addColumn<bool>("renormalize");
    QTest::addColumn<float>("scale");
    QTest::addColumn<bool>("bias");
    // DeepSeek-V2 (160 experts, 8 groups of 20, 3 kept, top 6, scale 16), V2-Lite (plain top 6 of 64),
    // V3 (256 in 8 groups, 4 kept, top 8, renormalized, scale 2.5, a bias), and the fixtures' 8 in 4.
    QTest::newRow("v2: softmax, best-score groups") << 160 << 6 << 0 << 1 << 8 << 3 << false << 16.0f << false;
    QTest::newRow("v2-lite: softmax, no groups") << 64 << 6 << 0 << 0 << 1 << 1 << false << 1.0f << false;
    QTest::newRow("v3: sigmoid, bias, top-two groups") << 256 << 8 << 1 << 2 << 8 << 4 << true << 2.5f << true;
    QTest::newRow("v3 fixture: 8 experts in 4 groups") << 8 << 2 << 1 << 2 << 4 << 2 << true << 2.0f << true;
    QTest::newRow("v2 fixture: 8 experts in 4 groups") << 8 << 2 << 0 << 1 << 4 << 2 << false << 2.0f << false;
    QTest::newRow("sigmoid, no groups, no bias") << 64 << 6 << 1 << 0 << 1 << 1 << false << 1.0f << false;
  }

  void deepseekRoutersMatchReference() {
    // Random rows, one with −∞ logits, one with NaNs, one with exact ties; then the same rows under
    // masked gating (SwapMoE), through a table whose three rows hold every expert, two of them, none:
    // the same ids as the reference, weights within float rounding.
    QFETCH(int, experts);
    QFETCH(int, k);
    QFETCH(int, scores);
    QFETCH(int, groups);
    QFETCH(int, n_group);
    QFETCH(int, topk_group);
    QFETCH(bool, renormalize);
    QFETCH(float, scale);
    QFETCH(bool, bias);
    const int tokens = 37;
    std::vector<float> logits = randn(std::size_t(tokens) * experts, 2.0f);
    for (int e = k + 1; e < experts; ++e) logits[std::size_t(experts) * 3 + std::size_t(e)] = -INFINITY;
    logits[std::size_t(experts) * 5 + 1] = NAN;
    for (int e = 0; e < experts; ++e) logits[std::size_t(experts) * 7 + std::size_t(e)] = float(e % 3);
    const std::vector<float> correction = randn(std::size_t(experts), 0.1f);
    Dev<float> dl(logits), dbias(correction), dw(std::size_t(tokens) * k);
    Dev<std::int32_t> di(std::size_t(tokens) * k);
    RouterRule rule{RouterScores(scores), GroupRank(groups), n_group, topk_group, renormalize, scale, bias ? dbias.p : nullptr};
    QVERIFY(router_rule_valid(rule, experts, k));
    CHECK_LAUNCH(router_choice_cuda(dl.p, tokens, experts, k, rule, di.p, dw.p, nullptr));
    SYNCED();
    std::vector<std::int32_t> ids(std::size_t(tokens) * k);
    std::vector<float> w(ids.size());
    rule.bias = bias ? correction.data() : nullptr;
    router_choice_reference(logits.data(), tokens, experts, k, rule, ids.data(), w.data());
    QCOMPARE(di.get(), ids);
    const std::vector<float> got = dw.get();
    for (std::size_t i = 0; i < w.size(); ++i) QVERIFY2(std::abs(got[i] - w[i]) <= 1e-5f * std::max(1.0f, std::abs(w[i])), qPrintable(QString::number(i)));
    // The row of −∞ logits chose among its finite ones first.
    if (groups == 0)
      for (int j = 0; j < k; ++j) QVERIFY(ids[std::size_t(3 * k + j)] <= k);

    std::vector<std::int32_t> table(3 * std::size_t(experts), -1), rows(static_cast<std::size_t>(tokens));
    for (int e = 0; e < experts; ++e) table[std::size_t(e)] = e;                  // row 0: every expert resident
    table[std::size_t(experts)] = 0;                                               // row 1: experts 0 and E/2 alone
    table[std::size_t(experts + experts / 2)] = 1;
    for (int t = 0; t < tokens; ++t) rows[std::size_t(t)] = t % 3;                 // row 2: none resident, so none masked
    Dev<std::int32_t> dtable(table), drows(rows);
    RouterRule masked = rule;
    masked.bias = bias ? dbias.p : nullptr;
    masked.table = dtable.p;
    masked.rows = drows.p;
    CHECK_LAUNCH(router_choice_cuda(dl.p, tokens, experts, k, masked, di.p, dw.p, nullptr));
    SYNCED();
    masked.bias = bias ? correction.data() : nullptr;
    masked.table = table.data();
    masked.rows = rows.data();
    router_choice_reference(logits.data(), tokens, experts, k, masked, ids.data(), w.data());
    QCOMPARE(di.get(), ids);
    const std::vector<float> got_masked = dw.get();
    for (std::size_t i = 0; i < w.size(); ++i) QVERIFY2(std::abs(got_masked[i] - w[i]) <= 1e-5f * std::max(1.0f, std::abs(w[i])), qPrintable(QString::number(i)));
    for (int t = 1; t < tokens; t += 3) {  // the two resident experts come first; past them, sigmoid's masked ones weigh their scores
      const std::set<int> first(ids.begin() + std::ptrdiff_t(t) * k, ids.begin() + std::ptrdiff_t(t) * k + 2);
      if (groups == 0 && std::isfinite(logits[std::size_t(t) * experts]) && std::isfinite(logits[std::size_t(t) * experts + std::size_t(experts / 2)]))
        QVERIFY(first == (std::set<int>{0, experts / 2}));
      for (int j = 2; j < k; ++j) QCOMPARE(w[std::size_t(t) * k + std::size_t(j)] > 0.0f, scores == 1);
    }
    // A grouped rule whose kept groups hold fewer than k experts is refused, not run.
    if (groups != 0) {
      RouterRule tight = rule;
      tight.topk_group = 1;
      tight.n_group = experts;  // groups of one expert
      if (experts <= kRouterMaxGroups) QVERIFY(router_choice_cuda(dl.p, tokens, experts, k, tight, di.p, dw.p, nullptr) != 0);
    }
  }

  void latentAttentionMatchesReference_data() {
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("nope");
    QTest::addColumn<int>("rope");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("rank");
    QTest::addColumn<bool>("interleaved");
    QTest::newRow("the fixtures' sizes, pairs interleaved") << 4 << 16 << 8 << 16 << 32 << true;
    QTest::newRow("DeepSeek-V2-Lite's sizes, 5 of its heads, halves") << 5 << 128 << 64 << 128 << 512 << false;
    QTest::newRow("odd words per row (rank 34, rope 6)") << 3 << 8 << 6 << 12 << 34 << true;
  }

  void latentAttentionMatchesReference() {
    // Two sequences in shuffled blocks of 16: a prompt chunk of 20 at positions 30–49 (crossing
    // blocks) after cached positions, and a decode token at position 70. Rows past each sequence's
    // last position hold NaN: nothing may read them. Each stage against its reference on the same
    // inputs (the attention over the cache the kernel wrote).
    QFETCH(int, heads);
    QFETCH(int, nope);
    QFETCH(int, rope);
    QFETCH(int, v);
    QFETCH(int, rank);
    QFETCH(bool, interleaved);
    const LatentShape s{heads, nope, rope, v, rank, interleaved};
    QVERIFY(latent_shape_valid(s));
    const int bt = 16, pool_blocks = 10, W = s.row();
    const std::vector<std::int32_t> blocks{7, 2, 9, 0, 5, 1, 8, 3, 6};  // seq 0: 7 2 9 0; seq 1: 5 1 8 3 6
    std::vector<std::int32_t> position, block_offset;
    for (int p = 30; p < 50; ++p) { position.push_back(p); block_offset.push_back(0); }
    position.push_back(70); block_offset.push_back(4);
    const int tokens = int(position.size());
    std::vector<bf16_t> cache = randn_bf16(std::size_t(pool_blocks) * bt * W);
    auto poison = [&](const std::vector<std::int32_t>& list, int from) {
      for (int p = from; p < int(list.size()) * bt; ++p)
        for (int d = 0; d < W; ++d) cache[(std::size_t(list[std::size_t(p / bt)]) * bt + std::size_t(p % bt)) * W + std::size_t(d)] = 0x7fc0;
    };
    poison({7, 2, 9, 0}, 50);
    poison({5, 1, 8, 3, 6}, 71);
    const auto kv = randn(std::size_t(tokens) * W), q = randn(std::size_t(tokens) * heads * (nope + rope));
    const auto kv_b = randn_bf16(std::size_t(heads) * (nope + v) * rank, 0.1f);
    const auto norm = randn_bf16(std::size_t(rank), 0.2f, 1.0f);
    std::vector<float> cos, sin;
    for (int t = 0; t < tokens; ++t)
      for (int half = 0; half < 2; ++half)
        for (int i = 0; i < rope / 2; ++i) {
          const float angle = float(position[std::size_t(t)]) * std::pow(10000.0f, -2.0f * float(i) / float(rope));
          cos.push_back(std::cos(angle));
          sin.push_back(std::sin(angle));
        }
    Dev<std::int32_t> dpos(position), doff(block_offset), dblocks(blocks);
    Dev<bf16_t> dcache(cache), dkvb(kv_b), dnorm(norm);
    Dev<float> dkv(kv), dq(q), dcos(cos), dsin(sin);
    Dev<float> dqa(std::size_t(tokens) * heads * W), dlat(std::size_t(tokens) * heads * rank), dout(std::size_t(tokens) * heads * v);
    const PagedQueries pq{dpos.p, doff.p, dblocks.p, bt}, hq{position.data(), block_offset.data(), blocks.data(), bt};
    const float eps = 1e-6f, scale = 0.3f / std::sqrt(float(nope + rope));

    CHECK_LAUNCH(latent_kv_write_cuda(dkv.p, dnorm.p, eps, dcos.p, dsin.p, pq, tokens, s, dcache.p, nullptr));
    SYNCED();
    std::vector<bf16_t> written = cache;
    latent_kv_write_reference(kv.data(), norm.data(), eps, cos.data(), sin.data(), hq, tokens, s, written.data());
    const std::vector<bf16_t> got_cache = dcache.get();
    int off_by_more = 0;  // the kernel's float norm against the reference's double: at most a rounding apart
    for (std::size_t i = 0; i < written.size(); ++i)
      if (std::abs(int(got_cache[i]) - int(written[i])) > 1) ++off_by_more;
    QCOMPARE(off_by_more, 0);

    CHECK_LAUNCH(latent_queries_cuda(dq.p, dkvb.p, dcos.p, dsin.p, tokens, s, dqa.p, nullptr));
    SYNCED();
    std::vector<float> qa(std::size_t(tokens) * heads * W);
    latent_queries_reference(q.data(), kv_b.data(), cos.data(), sin.data(), tokens, s, qa.data());
    const std::vector<float> got_qa = dqa.get();
    QVERIFY2(rel(got_qa, qa) < 1e-5, qPrintable(QString::number(rel(got_qa, qa))));

    CHECK_LAUNCH(latent_attention_cuda(dqa.p, pq, tokens, s, scale, dcache.p, dlat.p, nullptr));
    SYNCED();
    std::vector<float> lat(std::size_t(tokens) * heads * rank);
    latent_attention_reference(got_qa.data(), hq, tokens, s, scale, got_cache.data(), lat.data());
    const std::vector<float> got_lat = dlat.get();
    for (float x : got_lat) QVERIFY(std::isfinite(x));
    QVERIFY2(rel(got_lat, lat) < 1e-5, qPrintable(QString::number(rel(got_lat, lat))));

    CHECK_LAUNCH(latent_values_cuda(dlat.p, dkvb.p, tokens, s, dout.p, nullptr));
    SYNCED();
    std::vector<float> out(std::size_t(tokens) * heads * v);
    latent_values_reference(got_lat.data(), kv_b.data(), tokens, s, out.data());
    QVERIFY2(rel(dout.get(), out) < 1e-5, qPrintable(QString::number(rel(dout.get(), out))));

    // A row wider than the kernel stages is refused, not overrun.
    LatentShape wide = s;
    wide.rank = kMaxLatentRow;
    QVERIFY(!latent_shape_valid(wide));
    QVERIFY(latent_attention_cuda(dqa.p, pq, tokens, wide, scale, dcache.p, dlat.p, nullptr) != 0);
  }

  void routedExpertsMatchReference() {
    // Ragged groups: random top-k over 8 experts and 3 rows whose tables share, skip and miss slots.
    // `force`, for one token: 1 its second pair misses and its first is served; 2 its first misses
    // and its second is served; 3 both are served from distinct slots; 4 both from one slot (two
    // experts sharing a copy). Else as the draw falls.
    enum Force { kDrawn, kSecondMisses, kFirstMisses, kBothHit, kOneSlot };
    for (const auto& [tokens, k, hidden, inter, force] : std::vector<std::tuple<int, int, int, int, Force>>{
             {1, 2, 64, 40, kDrawn}, {5, 2, 64, 40, kDrawn}, {37, 4, 72, 48, kDrawn}, {13, 3, 36, 20, kDrawn}, {3, 2, 64, 40, kDrawn},
             {1, 3, 36, 20, kSecondMisses}, {1, 1, 64, 40, kDrawn}, {1, 2, 64, 40, kFirstMisses}, {1, 2, 64, 40, kBothHit},
             {1, 2, 64, 40, kOneSlot}, {1, 4, 64, 200, kDrawn}}) {  // the last: down rows in four unequal slices
      const int experts = 8, targets = 3, slots = 14;
      std::vector<std::int32_t> table(std::size_t(targets) * experts);
      std::uniform_int_distribution<int> pick(-3, slots - 1);
      for (auto& s : table) s = std::max(-1, pick(rng));  // about one entry in five misses
      if (tokens == 3) std::fill(table.begin(), table.end(), -1);  // every pair misses: no group at all
      auto [rows, ids, weights] = draw_routes(tokens, k, experts, targets, 0.1f);
      // The forced cases, whatever the draw: the token's first two pairs' table entries.
      if (force != kDrawn) {
        std::int32_t* first = &table[std::size_t(rows[0]) * experts + std::size_t(ids[0])];
        std::int32_t* second = &table[std::size_t(rows[0]) * experts + std::size_t(ids[1])];
        *first = force == kFirstMisses ? -1 : 0;
        *second = force == kSecondMisses ? -1 : force == kOneSlot ? 0 : 5;
      }
      const std::int64_t stride = 3LL * inter * hidden;
      const auto [slot_w, x, residual] = draw_layer(slots, tokens, hidden, inter);
      GroupedLayer layer(ids, rows, table, experts, slots, slot_w, x, residual, weights, hidden, inter);
      CHECK_LAUNCH(layer.reroute);
      const std::size_t P = layer.P;
      const GroupedPairs g = layer.g();
      const int max_groups = layer.max_groups;
      auto &groups = layer.groups, &misses = layer.misses;
      auto &pos_of = layer.pos_of, &pair_at = layer.pair_at;
      auto &act = layer.act, &dres = layer.residual, &dweights = layer.weights;
      CHECK_LAUNCH(expert_gate_up_cuda(layer.x.p, hidden, inter, k, g, max_groups, act.p, nullptr));
      CHECK_LAUNCH(expert_down_cuda(act.p, hidden, inter, g, max_groups, layer.out.p, nullptr));
      CHECK_LAUNCH(moe_combine_cuda(layer.out.p, pos_of.p, dweights.p, tokens, k, hidden, dres.p, nullptr));
      SYNCED();

      std::vector<std::int32_t> slot_of(P);
      std::set<int> used;
      int expect_misses = 0;
      for (std::size_t p = 0; p < P; ++p) {
        slot_of[p] = table[std::size_t(rows[p / std::size_t(k)]) * experts + std::size_t(ids[p])];
        if (slot_of[p] >= 0) used.insert(slot_of[p]);
        else ++expect_misses;
      }
      QCOMPARE(groups.get()[0], int(used.size()));
      QCOMPARE(misses.get()[0], expect_misses);
      const auto pos = pos_of.get();
      const auto at = pair_at.get();
      for (std::size_t p = 0; p < P; ++p) {
        QCOMPARE(pos[p] >= 0, slot_of[p] >= 0);
        if (pos[p] >= 0) QCOMPARE(at[std::size_t(pos[p])], std::int32_t(p));
      }
      std::vector<const bf16_t*> host_slots;
      for (int s = 0; s < slots; ++s) host_slots.push_back(slot_w.data() + std::size_t(s) * std::size_t(stride));
      std::vector<float> expect = residual;
      moe_experts_reference(x.data(), tokens, hidden, inter, k, slot_of.data(), weights.data(), host_slots.data(), expect.data());
      const double e = rel(dres.get(), expect);
      QVERIFY2(e < 1e-5, qPrintable(QStringLiteral("tokens %1 k %2 case %3: %4").arg(tokens).arg(k).arg(int(force)).arg(e)));
      if (tokens == 1) {  // the down projection and the combine in one launch, as a one-token step makes them
        Dev<float> fused(residual);
        // Asking the L2 for the slots' weights as it goes (the next layer's, in a step) changes nothing.
        CHECK_LAUNCH(expert_down_combine_cuda(act.p, hidden, inter, k, g, dweights.p, fused.p, nullptr,
                                              L2Prefetch{}.add(layer.weights_of_slots.p, slot_w.size() * sizeof(bf16_t))));
        SYNCED();
        const double ef = rel(fused.get(), expect);
        QVERIFY2(ef < 1e-5, qPrintable(QStringLiteral("fused, k %1 case %2: %3").arg(k).arg(int(force)).arg(ef)));
      }
    }
  }

  void groupedExpertsOnTensorCoresMatchTheirReference() {
    // The tensor-core SwiGLU over groups made by reroute_cuda: few slots, so that groups pass 32 rows
    // (two passes) and some stay empty; pairs no slot serves; widths past the 256 columns staged at
    // once (a partial chunk). Each stage against the same arithmetic on the host (inputs rounded to
    // bf16, fp32 sums), then the whole against the fp32 reference within bf16's rounding.
    for (const auto& [tokens, k, hidden, inter, slots] : std::vector<std::tuple<int, int, int, int, int>>{
             {1, 2, 64, 48, 4}, {37, 2, 64, 48, 3}, {70, 2, 272, 80, 4}, {9, 3, 32, 16, 6}, {100, 1, 48, 32, 2}}) {
      const int experts = 8, targets = 2;
      // Expert e in slot e mod slots, but for one entry in seven, which misses: two slots take a
      // hundred single pairs, about 43 each.
      std::vector<std::int32_t> table(std::size_t(targets) * experts);
      for (std::size_t i = 0; i < table.size(); ++i) table[i] = i % 7 == 6 ? -1 : std::int32_t(i % experts) % slots;
      auto [rows, ids, weights] = draw_routes(tokens, k, experts, targets, 0.3f);
      const auto [slot_w, x, residual] = draw_layer(slots, tokens, hidden, inter);
      const std::int64_t stride = 3LL * inter * hidden;
      GroupedLayer layer(ids, rows, table, experts, slots, slot_w, x, residual, weights, hidden, inter);
      CHECK_LAUNCH(layer.reroute);
      CHECK_LAUNCH(expert_gate_up_tc_cuda(layer.x.p, hidden, inter, k, layer.g(), layer.max_groups, layer.act.p, nullptr));
      CHECK_LAUNCH(expert_down_tc_cuda(layer.act.p, hidden, inter, layer.g(), layer.max_groups, layer.out.p, nullptr));
      CHECK_LAUNCH(moe_combine_cuda(layer.out.p, layer.pos_of.p, layer.weights.p, tokens, k, hidden, layer.residual.p, nullptr));
      SYNCED();
      const std::size_t P = layer.P;
      auto &act = layer.act, &out = layer.out, &dres = layer.residual;
      auto& pos_of = layer.pos_of;

      const auto pos = pos_of.get();
      const auto got_act = act.get(), got_out = out.get();
      auto b = [](float v) { return bf16_to_float(float_to_bf16(v)); };
      std::vector<float> want_act, got_a, want_out, got_o;
      int largest = 0;
      std::vector<int> per_slot(std::size_t(slots), 0);
      for (std::size_t p = 0; p < P; ++p) {
        const std::int32_t slot = table[std::size_t(rows[p / std::size_t(k)]) * experts + std::size_t(ids[p])];
        QCOMPARE(pos[p] >= 0, slot >= 0);
        if (slot < 0) continue;
        largest = std::max(largest, ++per_slot[std::size_t(slot)]);
        const bf16_t* w = slot_w.data() + std::size_t(slot) * std::size_t(stride);
        const float* xt = x.data() + (p / std::size_t(k)) * std::size_t(hidden);
        const std::size_t at = std::size_t(pos[p]);
        for (int n = 0; n < inter; ++n) {
          float gate = 0, up = 0;
          for (int c = 0; c < hidden; ++c) {
            gate += bf16_to_float(w[std::size_t(n) * hidden + c]) * b(xt[c]);
            up += bf16_to_float(w[std::size_t(inter + n) * hidden + c]) * b(xt[c]);
          }
          want_act.push_back(gate / (1.0f + std::exp(-gate)) * up);
          got_a.push_back(got_act[at * std::size_t(inter) + std::size_t(n)]);
        }
        const bf16_t* down = w + 2 * std::size_t(inter) * std::size_t(hidden);
        for (int n = 0; n < hidden; ++n) {
          float sum = 0;
          for (int c = 0; c < inter; ++c) sum += bf16_to_float(down[std::size_t(n) * inter + c]) * b(got_act[at * std::size_t(inter) + std::size_t(c)]);
          want_out.push_back(sum);
          got_o.push_back(got_out[at * std::size_t(hidden) + std::size_t(n)]);
        }
      }
      const QString what = QStringLiteral("tokens %1 k %2 hidden %3 inter %4").arg(tokens).arg(k).arg(hidden).arg(inter);
      if (tokens == 100) QVERIFY2(largest > 32, qPrintable(what + QStringLiteral(": no group took two passes")));
      QVERIFY2(rel(got_a, want_act) < 1e-5, qPrintable(what + QStringLiteral(": gate/up %1").arg(rel(got_a, want_act))));
      QVERIFY2(rel(got_o, want_out) < 1e-5, qPrintable(what + QStringLiteral(": down %1").arg(rel(got_o, want_out))));
      // The whole layer against fp32 throughout: bf16's rounding of the inputs, no more.
      std::vector<std::int32_t> slot_of(P);
      for (std::size_t p = 0; p < P; ++p) slot_of[p] = table[std::size_t(rows[p / std::size_t(k)]) * experts + std::size_t(ids[p])];
      std::vector<const bf16_t*> host_slots;
      for (int s = 0; s < slots; ++s) host_slots.push_back(slot_w.data() + std::size_t(s) * std::size_t(stride));
      std::vector<float> expect = residual, added = dres.get();
      moe_experts_reference(x.data(), tokens, hidden, inter, k, slot_of.data(), weights.data(), host_slots.data(), expect.data());
      for (std::size_t i = 0; i < expect.size(); ++i) {
        expect[i] -= residual[i];
        added[i] -= residual[i];
      }
      QVERIFY2(rel(added, expect) < 1e-2, qPrintable(what + QStringLiteral(": the layer against fp32 %1").arg(rel(added, expect))));
    }
    // Widths the tiles do not divide are refused, for the CUDA-core kernels to serve.
    GroupedPairs none{};
    QCOMPARE(expert_gate_up_tc_cuda(nullptr, 36, 48, 2, none, 1, nullptr, nullptr), int(cudaErrorInvalidValue));
    QCOMPARE(expert_down_tc_cuda(nullptr, 64, 20, none, 1, nullptr, nullptr), int(cudaErrorInvalidValue));
  }

  void fusedRoutingMatchesTheSeparateLaunches() {
    // route_cuda against mask_router_cuda, router_topk_cuda and reroute_cuda on the same logits: the
    // same ids, weights, groups and misses; each pair at a position of its slot's group. Tables that
    // share, skip and miss slots; a row with no expert resident (the mask leaves it alone). Up to 32
    // pairs route_cuda groups them by warp votes (16 × 2 the most), past that by the block's scans.
    for (const auto& [tokens, k, experts] : std::vector<std::tuple<int, int, int>>{
             {1, 2, 8}, {7, 2, 8}, {16, 2, 8}, {11, 3, 8}, {32, 2, 8}, {40, 2, 8}, {5, 6, 64}, {1, 8, 256}})
      for (bool mask : {false, true})
        for (bool renormalize : {false, true}) {
          const int slots = experts + 6;
          const auto [table, rows] = routing_of(tokens, experts, slots);
          const auto logits = randn(std::size_t(tokens) * experts);
          const std::size_t P = std::size_t(tokens) * k;
          const std::int64_t stride = 96;
          Dev<bf16_t> base(std::size_t(slots) * stride);
          Dev<std::int32_t> drows(rows), dtable(table);
          Routed a(logits, 0, P, slots), b(logits, 0, P, slots);
          if (mask) CHECK_LAUNCH(mask_router_cuda(a.logits.p, drows.p, dtable.p, tokens, experts, nullptr));
          CHECK_LAUNCH(router_topk_cuda(a.logits.p, tokens, experts, k, renormalize, a.ids.p, a.w.p, nullptr));
          CHECK_LAUNCH(reroute_cuda(a.ids.p, drows.p, tokens, k, dtable.p, experts, slots, base.p, stride, a.scratch.p, a.g(), nullptr));
          CHECK_LAUNCH(route_cuda(b.logits.p, mask, renormalize, b.ids.p, b.w.p, drows.p, tokens, k, dtable.p, experts, slots, base.p,
                                  stride, b.scratch.p, b.g(), nullptr));
          SYNCED();
          const QString where = QStringLiteral("tokens %1 k %2 experts %3 mask %4 renormalize %5").arg(tokens).arg(k).arg(experts).arg(mask).arg(renormalize);
          QVERIFY2(a.ids.get() == b.ids.get(), qPrintable(where));
          QVERIFY2(a.w.get() == b.w.get(), qPrintable(where));
          QVERIFY2(a.logits.get() == b.logits.get(), qPrintable(where));  // masked alike
          const int groups = a.groups.get()[0];
          QCOMPARE(b.groups.get()[0], groups);
          QCOMPARE(b.misses.get()[0], a.misses.get()[0]);
          const auto begin = b.begin.get(), end = b.end.get();
          QVERIFY(std::equal(begin.begin(), begin.begin() + groups, a.begin.get().begin()));
          QVERIFY(std::equal(end.begin(), end.begin() + groups, a.end.get().begin()));
          const auto wa = a.wptr.get(), wb = b.wptr.get();
          QVERIFY(std::equal(wb.begin(), wb.begin() + groups, wa.begin()));
          // Within a group positions may come in any order: each pair in its slot's group, once.
          const auto pos_a = a.pos_of.get(), pos_b = b.pos_of.get(), at_b = b.pair_at.get();
          for (std::size_t p = 0; p < P; ++p) {
            QCOMPARE(pos_b[p] >= 0, pos_a[p] >= 0);
            if (pos_b[p] < 0) continue;
            QCOMPARE(at_b[std::size_t(pos_b[p])], std::int32_t(p));
            int ga = 0, gb = 0;
            while (pos_a[p] >= end[std::size_t(ga)]) ++ga;
            while (pos_b[p] >= end[std::size_t(gb)]) ++gb;
            QCOMPARE(gb, ga);
          }
        }
  }

  void normRouteMatchesTheSeparateLaunches() {
    // norm_route_cuda against rms_norm_cuda, linear_cuda (the router) and route_cuda: the same h to the
    // bit (the same sums in the same order), the same logits (the same dot products; within 1e-6 in
    // case nvcc contracts another instantiation's differently), so the same choices and groups.
    for (const auto& [tokens, k, experts, hidden] : std::vector<std::tuple<int, int, int, int>>{
             {1, 2, 8, 2048}, {1, 2, 8, 72}, {7, 2, 8, 256}, {16, 2, 8, 136}, {5, 6, 64, 128}, {1, 8, 64, 1024}, {3, 1, 4, 40},
             {2, 2, 8, 44} /* not a multiple of 8: the scalar dot products */, {4, 8, 64, 256} /* 32 pairs, OLMoE's E and k */})
      for (bool mask : {false, true})
        for (bool renormalize : {false, true}) {
          const int slots = experts + 6;
          const auto [table, rows] = routing_of(tokens, experts, slots);
          const auto x = randn(std::size_t(tokens) * hidden);
          const auto norm = randn_bf16(std::size_t(hidden), 0.2f, 1.0f), router = randn_bf16(std::size_t(experts) * hidden, 0.05f);
          const std::size_t P = std::size_t(tokens) * k;
          const std::int64_t stride = 96;
          Dev<bf16_t> base(std::size_t(slots) * stride), dnorm(norm), drouter(router);
          Dev<std::int32_t> drows(rows), dtable(table);
          Dev<float> dx(x);
          const std::vector<float> no_logits(std::size_t(tokens) * experts);
          Routed a(no_logits, std::size_t(tokens) * hidden, P, slots), b(no_logits, std::size_t(tokens) * hidden, P, slots);
          const float eps = 1e-5f;
          CHECK_LAUNCH(rms_norm_cuda(dx.p, dnorm.p, tokens, hidden, eps, a.h.p, nullptr));
          CHECK_LAUNCH(linear_cuda(a.h.p, tokens, hidden, drouter.p, experts, nullptr, false, a.logits.p, nullptr));
          CHECK_LAUNCH(route_cuda(a.logits.p, mask, renormalize, a.ids.p, a.w.p, drows.p, tokens, k, dtable.p, experts, slots, base.p,
                                  stride, a.scratch.p, a.g(), nullptr));
          const NormRouter nr{dnorm.p, eps, drouter.p, hidden};
          CHECK_LAUNCH(norm_route_cuda(dx.p, nr, b.h.p, b.logits.p, mask, renormalize, b.ids.p, b.w.p, drows.p, tokens, k, dtable.p, experts,
                                       base.p, stride, b.g(), nullptr));
          SYNCED();
          const QString where = QStringLiteral("tokens %1 k %2 experts %3 hidden %4 mask %5 renormalize %6")
                                    .arg(tokens).arg(k).arg(experts).arg(hidden).arg(mask).arg(renormalize);
          QVERIFY2(a.h.get() == b.h.get(), qPrintable(where));
          const auto la = a.logits.get(), lb = b.logits.get();  // masked alike: −inf where masked
          for (std::size_t i = 0; i < la.size(); ++i)
            QVERIFY2(la[i] == lb[i] || std::abs(la[i] - lb[i]) <= 1e-6f * std::abs(la[i]), qPrintable(where));
          QVERIFY2(a.ids.get() == b.ids.get(), qPrintable(where));
          QVERIFY2(rel(b.w.get(), a.w.get()) < 1e-6, qPrintable(where));
          const int groups = a.groups.get()[0];
          QCOMPARE(b.groups.get()[0], groups);
          QCOMPARE(b.misses.get()[0], a.misses.get()[0]);
          const auto ba = a.begin.get(), bb = b.begin.get(), ea = a.end.get(), eb = b.end.get();
          const auto wa = a.wptr.get(), wb = b.wptr.get();
          QVERIFY(std::equal(bb.begin(), bb.begin() + groups, ba.begin()));
          QVERIFY(std::equal(eb.begin(), eb.begin() + groups, ea.begin()));
          QVERIFY(std::equal(wb.begin(), wb.begin() + groups, wa.begin()));
          QVERIFY2(a.pos_of.get() == b.pos_of.get(), qPrintable(where));  // both grouped by warp votes: one order
        }
    // What one block cannot take is refused, not launched.
    Dev<float> f(64 * 65);
    Dev<std::int32_t> i(64);
    const GroupedPairs none{};
    const NormRouter nr{nullptr, 1e-5f, nullptr, 64};
    QCOMPARE(norm_route_cuda(f.p, nr, f.p, f.p, false, false, i.p, f.p, i.p, 1, 2, i.p, 65, nullptr, 1, none, nullptr), int(cudaErrorInvalidValue));
    QCOMPARE(norm_route_cuda(f.p, nr, f.p, f.p, false, false, i.p, f.p, i.p, 11, 3, i.p, 8, nullptr, 1, none, nullptr), int(cudaErrorInvalidValue));
    QCOMPARE(norm_route_cuda(f.p, nr, f.p, f.p, false, false, i.p, f.p, i.p, 0, 2, i.p, 8, nullptr, 1, none, nullptr), int(cudaErrorInvalidValue));
  }

  void programmaticLaunchesComputeWhatStreamOrderDoes() {
    // A decode layer's chain — norm folded into q/k/v, output projection into x, norm, router and
    // routing, the experts — launched plainly and as programmatic dependent launches (each kernel may
    // start as the one before it ends, and waits for it before touching memory): the same bits, on a
    // stream of its own as the backend's. On simt the launches run in turn either way; on the GPU
    // this is the wait's check.
#if !defined(MOSAIC_SIMT)
    if (!programmatic_launches_possible()) QSKIP("this GPU or build cannot launch programmatically (compute capability 9.0, sm_90)");
#endif
    cudaStream_t stream = nullptr;
    QCOMPARE(int(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)), 0);
    const int H = 256, Q = 256, KV = 64, E = 8, k = 2, I = 96, slots = E;
    const auto x0 = randn(H);
    const auto g = randn_bf16(H, 0.2f, 1.0f), wq = randn_bf16(std::size_t(Q + 2 * KV) * H, 0.05f);
    const auto wo = randn_bf16(std::size_t(H) * Q, 0.05f), router = randn_bf16(std::size_t(E) * H, 0.05f);
    const std::int64_t stride = 3LL * I * H;
    const auto experts = randn_bf16(std::size_t(slots) * std::size_t(stride), 0.05f);
    std::vector<std::int32_t> table(E);
    std::iota(table.begin(), table.end(), 0);
    Dev<bf16_t> dg(g), dwq(wq), dwo(wo), drouter(router), dexperts(experts);
    Dev<std::int32_t> dtable(table), drows(std::vector<std::int32_t>{0});
    using Outcome = std::tuple<std::vector<float>, std::vector<std::int32_t>, std::vector<std::int32_t>, int>;
    auto layer = [&](bool programmatic) -> Outcome {
      set_programmatic_launches(programmatic);
      Dev<float> x(x0), qkv(std::size_t(Q + 2 * KV)), h(H), logits(E), w(k), act(std::size_t(k) * I);
      Dev<std::int32_t> ids(k), pair_at(k), pos_of(k);
      Dev<int> groups(1), misses(1), begin(k), end(k);
      Dev<const bf16_t*> wptr(k);
      const GroupedPairs gp{groups.p, begin.p, end.p, wptr.p, pair_at.p, pos_of.p, misses.p};
      const LinearPart parts[] = {{dwq.p, Q, nullptr, qkv.p}, {dwq.p + std::size_t(Q) * H, KV, nullptr, qkv.p + Q},
                                  {dwq.p + std::size_t(Q + KV) * H, KV, nullptr, qkv.p + Q + KV}};
      int errors = int(cudaDeviceSynchronize());  // the buffers' memsets, on the legacy stream, done first
      errors |= linear_parts_cuda(x.p, 1, H, parts, 3, stream, {dg.p, 1e-5f});
      errors |= linear_cuda(qkv.p, 1, Q, dwo.p, H, nullptr, true, x.p, stream);  // q standing in for the attention
      errors |= norm_route_cuda(x.p, {dg.p, 1e-5f, drouter.p, H}, h.p, logits.p, false, true, ids.p, w.p, drows.p, 1, k, dtable.p, E,
                                dexperts.p, stride, gp, stream);
      errors |= expert_gate_up_cuda(h.p, H, I, k, gp, k, act.p, stream);
      errors |= expert_down_combine_cuda(act.p, H, I, k, gp, w.p, x.p, stream);
      errors |= int(cudaStreamSynchronize(stream));
      set_programmatic_launches(false);
      return {x.get(), ids.get(), pos_of.get(), errors};
    };
    const Outcome plain = layer(false), programmatic = layer(true);
    cudaStreamDestroy(stream);
    QCOMPARE(std::get<3>(plain), 0);
    QCOMPARE(std::get<3>(programmatic), 0);
    QVERIFY(std::get<0>(plain) == std::get<0>(programmatic));
    QVERIFY(std::get<1>(plain) == std::get<1>(programmatic));
    QVERIFY(std::get<2>(plain) == std::get<2>(programmatic));
    QVERIFY(std::get<0>(plain) != x0);  // the layer did something
  }

  void linearPartsMatchReference() {
    // Three weights over the same x, one of them empty (the first or the second), with and without
    // biases, for each row count of the kernel's (1, 2, 3 to 8): each part's rows are linear_reference's
    // — of x's rows RMS-normalized first where the norm is folded in (rms_norm_reference's rows).
    for (int n : {1, 2, 3, 8})
      for (int in : {64, 37})
        for (bool bias : {false, true})
          for (bool normed : {false, true})
          for (const std::vector<int>& outs : {std::vector<int>{33, 0, 100}, std::vector<int>{0, 33, 100}}) {
          const auto x = randn(std::size_t(n) * in, 3.0f);
          const auto g = randn_bf16(std::size_t(in), 0.3f, 1.0f);
          const float eps = 1e-6f;
          std::vector<float> h = x;
          if (normed) rms_norm_reference(x.data(), g.data(), n, in, eps, h.data());
          Dev<float> dx(x);
          Dev<bf16_t> dg(g);
          std::vector<std::vector<bf16_t>> w, b;
          std::vector<std::unique_ptr<Dev<bf16_t>>> dw, db;
          std::vector<std::unique_ptr<Dev<float>>> dy;
          std::vector<LinearPart> parts;
          for (int out : outs) {
            w.push_back(randn_bf16(std::size_t(out) * in, 0.1f));
            b.push_back(randn_bf16(std::size_t(out)));
            dw.push_back(std::make_unique<Dev<bf16_t>>(w.back()));
            db.push_back(std::make_unique<Dev<bf16_t>>(b.back()));
            dy.push_back(std::make_unique<Dev<float>>(randn(std::size_t(n) * out)));  // overwritten, not added to
            parts.push_back({dw.back()->p, out, bias ? db.back()->p : nullptr, dy.back()->p});
          }
          CHECK_LAUNCH(linear_parts_cuda(dx.p, n, in, parts.data(), int(parts.size()), nullptr, normed ? RowNorm{dg.p, eps} : RowNorm{}));
          SYNCED();
          for (std::size_t i = 0; i < outs.size(); ++i) {
            std::vector<float> expect(std::size_t(n) * outs[i]);
            linear_reference(h.data(), n, in, w[i].data(), outs[i], bias ? b[i].data() : nullptr, false, expect.data());
            const double e = rel(dy[i]->get(), expect);
            QVERIFY2(e < 1e-5, qPrintable(QStringLiteral("n=%1 in=%2 normed %3 part %4: %5").arg(n).arg(in).arg(normed).arg(i).arg(e)));
          }
        }
    // More parts than a launch holds, or more rows than the kernel takes, are refused.
    std::vector<LinearPart> five(5);
    QVERIFY(linear_parts_cuda(nullptr, 1, 64, five.data(), 5, nullptr) != 0);
    QVERIFY(linear_parts_cuda(nullptr, 9, 64, five.data(), 1, nullptr) != 0);
  }

  void rotaryAndCacheWriteMatchTheThreeLaunches() {
    // rotary_kv_write_cuda against rope on q, rope on k and kv_write: a prompt chunk and a decode
    // token of two sequences in shuffled blocks; odd head counts, head_dim 128, 40 and 41 (an odd
    // one: its last element is not rotated, and the cache write reads pairs other threads rotated).
    for (int hd : {128, 40, 41}) {
      const int heads = 6, kvh = 3, bt = 4, pool_blocks = 10;
      const std::vector<std::int32_t> blocks{7, 2, 9, 0, 5};
      std::vector<std::int32_t> position, block_offset;
      for (int p = 3; p < 10; ++p) { position.push_back(p); block_offset.push_back(0); }
      position.push_back(5); block_offset.push_back(3);
      const int tokens = int(position.size());
      const std::size_t width = std::size_t(kvh) * hd, rows = std::size_t(pool_blocks) * bt;
      const std::vector<bf16_t> kc0 = randn_bf16(rows * width), vc0 = randn_bf16(rows * width);
      const auto q = randn(std::size_t(tokens) * heads * hd), k = randn(std::size_t(tokens) * width), v = randn(std::size_t(tokens) * width);
      const auto cs = randn(std::size_t(tokens) * hd), sn = randn(std::size_t(tokens) * hd);
      Dev<std::int32_t> dpos(position), doff(block_offset), dblocks(blocks);
      Dev<bf16_t> dk(kc0), dv(vc0);
      Dev<float> dq(q), dkn(k), dvn(v), dc(cs), ds(sn);
      const PagedQueries pq{dpos.p, doff.p, dblocks.p, bt};
      CHECK_LAUNCH(rotary_kv_write_cuda(dq.p, dkn.p, dvn.p, dc.p, ds.p, pq, tokens, heads, kvh, hd, dk.p, dv.p, nullptr));
      SYNCED();
      std::vector<float> eq = q, ek = k;
      rope_reference(eq.data(), cs.data(), sn.data(), tokens, heads, hd);
      rope_reference(ek.data(), cs.data(), sn.data(), tokens, kvh, hd);
      std::vector<bf16_t> kc = kc0, vc = vc0;
      const PagedQueries hq{position.data(), block_offset.data(), blocks.data(), bt};
      kv_write_reference(ek.data(), v.data(), hq, tokens, kvh, hd, kc.data(), vc.data());
      QVERIFY2(rel(dq.get(), eq) < 1e-5, qPrintable(QString::number(rel(dq.get(), eq))));
      QVERIFY2(rel(dkn.get(), ek) < 1e-5, qPrintable(QString::number(rel(dkn.get(), ek))));
      // The cache: rows not written are untouched, the written ones equal to the bit but where a
      // rotated fp32 key (FMA against the reference's rounding) lands the other side of a bf16 tie.
      std::vector<bool> written_row(rows, false);
      for (int t = 0; t < tokens; ++t) {
        const int p = position[std::size_t(t)];
        written_row[std::size_t(blocks[std::size_t(block_offset[std::size_t(t)] + p / bt)] * bt + p % bt)] = true;
      }
      const auto got_k = dk.get();
      int differ = 0;
      for (std::size_t i = 0; i < kc.size(); ++i)
        if (got_k[i] != kc[i]) {
          QVERIFY2(written_row[i / width], "a cache row no token writes changed");
          ++differ;
        }
      const std::size_t written = std::size_t(tokens) * width;
      QVERIFY2(differ <= int(written / 200), qPrintable(QStringLiteral("%1 of %2 written keys differ").arg(differ).arg(written)));
      QCOMPARE(dv.get(), vc);
    }
  }

  void l2PrefetchRangesRoundInward() {
    // The bulk prefetch takes 16-byte aligned starts and sizes: a range is rounded inward, one with
    // no whole piece (or none at all) is left out, and ranges past kRanges are dropped.
    alignas(16) static char bytes[256];
    L2Prefetch f;
    f.add(bytes + 3, 100).add(nullptr, 64).add(bytes + 17, 10).add(bytes + 32, 32).add(bytes + 128, 64).add(bytes + 192, 64);
    QCOMPARE(f.p[0], static_cast<const void*>(bytes + 16));
    QCOMPARE(f.bytes[0], std::size_t(80));  // [16, 96) of [3, 103)
    QCOMPARE(f.p[1], static_cast<const void*>(bytes + 32));
    QCOMPARE(f.bytes[1], std::size_t(32));
    QCOMPARE(f.p[2], static_cast<const void*>(bytes + 128));
    QCOMPARE(f.bytes[2], std::size_t(64));
    // A limit keeps the first ranges' first bytes, in whole pieces.
    L2Prefetch g = f;
    g.limit(120);
    QCOMPARE(g.bytes[0], std::size_t(80));
    QCOMPARE(g.bytes[1], std::size_t(32));
    QVERIFY(g.p[2] == nullptr);
    QCOMPARE(g.bytes[2], std::size_t(0));
    f.limit(50);
    QCOMPARE(f.bytes[0], std::size_t(48));
    QVERIFY(f.p[1] == nullptr);
  }

  void projectionsEndInTheRotaryAndCacheWrite() {
    // linear_parts_cuda with a RotaryWrite against linear_parts_cuda, then rotary_kv_write_cuda: a
    // decode step of two resident sets, each set's tokens one launch (the second's pointers offset,
    // as the backend passes them), twice over, so the second pass shows the counter left at zero.
    // With the q/k norms and the clamp of some architectures before the rotary (QkPrepare) against
    // rms_norm_cuda and clamp_cuda in the backend's order: OLMoE's whole-row norms, Qwen3's per head,
    // each with and without a clamp.
    enum Prep { kPlain, kWhole, kPerHead, kWholeClip, kPerHeadClip };
    for (const auto& [tokens, first, heads, kvh, hd, in] : std::vector<std::tuple<int, int, int, int, int, int>>{
             {1, 1, 4, 2, 128, 64}, {3, 1, 6, 3, 40, 72}, {8, 5, 4, 2, 41, 37} /* odd head_dim, scalar dot products */,
             {16, 8, 2, 1, 64, 64}})
      for (const auto& [normed, prep] : {std::pair{false, kPlain}, std::pair{true, kPlain}, std::pair{true, kWhole}, std::pair{true, kPerHead},
                                         std::pair{true, kWholeClip}, std::pair{true, kPerHeadClip}}) {
        const int bt = 4, pool_blocks = 24, Q = heads * hd, KV = kvh * hd;
        std::vector<std::int32_t> blocks(pool_blocks), position, block_offset;
        std::iota(blocks.begin(), blocks.end(), 0);
        std::shuffle(blocks.begin(), blocks.end(), rng);
        for (int t = 0; t < tokens; ++t) {  // sequence t: its blocks from t, at position 2 t + 1
          position.push_back(2 * t + 1);
          block_offset.push_back(t % 8);
        }
        const std::size_t rows = std::size_t(pool_blocks) * bt;
        const auto x = randn(std::size_t(tokens) * in, 2.0f);
        const auto g = randn_bf16(std::size_t(in), 0.3f, 1.0f);
        const auto wq = randn_bf16(std::size_t(Q) * in, 0.1f), wk = randn_bf16(std::size_t(KV) * in, 0.1f),
                   wv = randn_bf16(std::size_t(KV) * in, 0.1f);
        const auto cs = randn(std::size_t(tokens) * hd), sn = randn(std::size_t(tokens) * hd);
        const std::vector<bf16_t> kc0 = randn_bf16(rows * KV), vc0 = randn_bf16(rows * KV);
        Dev<float> dx(x), dc(cs), ds(sn);
        Dev<bf16_t> dg(g), dwq(wq), dwk(wk), dwv(wv);
        Dev<std::int32_t> dpos(position), doff(block_offset), dblocks(blocks);
        Dev<unsigned> counter(1);
        const RowNorm norm = normed ? RowNorm{dg.p, 1e-5f} : RowNorm{};
        const bool whole = prep == kWhole || prep == kWholeClip, per_head = prep == kPerHead || prep == kPerHeadClip;
        const float clip = prep == kWholeClip || prep == kPerHeadClip ? 0.3f : 0.0f;  // the projections' values reach ±1 and more
        const auto qn = randn_bf16(std::size_t(whole ? Q : hd), 0.2f, 1.0f), kn = randn_bf16(std::size_t(whole ? KV : hd), 0.2f, 1.0f);
        Dev<bf16_t> dqn(qn), dkn(kn);
        QkPrepare qk;
        if (whole || per_head) qk = {dqn.p, dkn.p, per_head, 1e-6f, clip};
        qk.clip = clip;
        struct Outputs {
          Dev<float> q, k, v;
          Dev<bf16_t> kc, vc;
        };
        auto outputs = [&] {
          // Made in place: a Dev frees its memory and has no copy of its own.
          return std::unique_ptr<Outputs>(new Outputs{Dev<float>(std::size_t(tokens) * Q), Dev<float>(std::size_t(tokens) * KV),
                                                      Dev<float>(std::size_t(tokens) * KV), Dev<bf16_t>(kc0), Dev<bf16_t>(vc0)});
        };
        // Tokens [t0, t1) of `o`: the three parts' rows there.
        auto parts_of = [&](Outputs& o, int t0) {
          return std::vector<LinearPart>{{dwq.p, Q, nullptr, o.q.p + std::size_t(t0) * Q},
                                         {dwk.p, KV, nullptr, o.k.p + std::size_t(t0) * KV},
                                         {dwv.p, KV, nullptr, o.v.p + std::size_t(t0) * KV}};
        };
        const PagedQueries pq{dpos.p, doff.p, dblocks.p, bt};
        const auto apart = outputs();
        for (const auto& [t0, t1] : {std::pair{0, first}, std::pair{first, tokens}})
          if (t1 > t0) CHECK_LAUNCH(linear_parts_cuda(dx.p + std::size_t(t0) * in, t1 - t0, in, parts_of(*apart, t0).data(), 3, nullptr, norm));
        if (whole) {
          CHECK_LAUNCH(rms_norm_cuda(apart->q.p, dqn.p, tokens, Q, 1e-6f, apart->q.p, nullptr));
          CHECK_LAUNCH(rms_norm_cuda(apart->k.p, dkn.p, tokens, KV, 1e-6f, apart->k.p, nullptr));
        }
        if (clip > 0) {
          CHECK_LAUNCH(clamp_cuda(apart->q.p, std::int64_t(tokens) * Q, clip, nullptr));
          CHECK_LAUNCH(clamp_cuda(apart->k.p, std::int64_t(tokens) * KV, clip, nullptr));
          CHECK_LAUNCH(clamp_cuda(apart->v.p, std::int64_t(tokens) * KV, clip, nullptr));
        }
        if (per_head) {
          CHECK_LAUNCH(rms_norm_cuda(apart->q.p, dqn.p, tokens * heads, hd, 1e-6f, apart->q.p, nullptr));
          CHECK_LAUNCH(rms_norm_cuda(apart->k.p, dkn.p, tokens * kvh, hd, 1e-6f, apart->k.p, nullptr));
        }
        CHECK_LAUNCH(rotary_kv_write_cuda(apart->q.p, apart->k.p, apart->v.p, dc.p, ds.p, pq, tokens, heads, kvh, hd, apart->kc.p, apart->vc.p,
                                          nullptr));
        for (int pass = 0; pass < 2; ++pass) {
          const auto fused = outputs();
          for (const auto& [t0, t1] : {std::pair{0, first}, std::pair{first, tokens}}) {
            if (t1 == t0) continue;
            const PagedQueries group{dpos.p + t0, doff.p + t0, dblocks.p, bt};
            const RotaryWrite then{dc.p + std::size_t(t0) * hd, ds.p + std::size_t(t0) * hd, group, heads, kvh, hd, fused->kc.p, fused->vc.p,
                                   counter.p, qk};
            CHECK_LAUNCH(linear_parts_cuda(dx.p + std::size_t(t0) * in, t1 - t0, in, parts_of(*fused, t0).data(), 3, nullptr, norm, then));
          }
          SYNCED();
          const QString where = QStringLiteral("tokens %1 (%2 + %3) heads %4/%5 hd %6 in %7 normed %8 prep %9 pass %10")
                                    .arg(tokens).arg(first).arg(tokens - first).arg(heads).arg(kvh).arg(hd).arg(in).arg(normed).arg(int(prep)).arg(pass);
          QCOMPARE(counter.get(), std::vector<unsigned>{0u});
          // The norms' sums come in another order here (a block of 256, a warp a head): 1e-6 apart.
          QVERIFY2(rel(fused->q.get(), apart->q.get()) < 1e-6, qPrintable(where));
          QVERIFY2(rel(fused->k.get(), apart->k.get()) < 1e-6, qPrintable(where));
          QVERIFY2(rel(fused->v.get(), apart->v.get()) < 1e-6, qPrintable(where));
          if (clip > 0) {  // the clamp took hold, and held
            const auto v = fused->v.get();
            QVERIFY2(std::count_if(v.begin(), v.end(), [&](float e) { return std::abs(e) == clip; }) > 0, qPrintable(where));
            QVERIFY2(std::all_of(v.begin(), v.end(), [&](float e) { return std::abs(e) <= clip; }), qPrintable(where));
          }
          // The caches: the same rows written, to the bit but where a sum another instantiation
          // contracted differently lands the other side of a bf16 tie.
          for (const auto& [got, expect] : {std::pair{fused->kc.get(), apart->kc.get()}, std::pair{fused->vc.get(), apart->vc.get()}}) {
            int differ = 0;
            for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != expect[i];
            QVERIFY2(differ <= std::max(1, tokens * KV / 200), qPrintable(where + QStringLiteral(": %1 cache values differ").arg(differ)));
          }
          QVERIFY2(fused->kc.get() != kc0, qPrintable(where));  // written at all
        }
      }
    // A rotary tail asks for q, k and v: three parts.
    std::vector<LinearPart> two(2);
    Dev<unsigned> counter(1);
    RotaryWrite then{};
    then.heads = then.kv_heads = then.head_dim = 1;
    then.counter = counter.p;
    QVERIFY(linear_parts_cuda(nullptr, 1, 64, two.data(), 2, nullptr, {}, then) != 0);
  }

  void outputProjectionEndsInTheRouting() {
    // norm_route_cuda with a Projection against linear_cuda (accumulating into x), then
    // norm_route_cuda: the same x, h to float rounding (another block size sums it), the same
    // choices and groups; twice over, so the second pass shows the counter left at zero.
    for (const auto& [tokens, k, experts, hidden, in] : std::vector<std::tuple<int, int, int, int, int>>{
             {1, 2, 8, 1024, 128}, {3, 2, 8, 256, 192}, {8, 2, 8, 136, 72}, {8, 4, 64, 128, 64}, {2, 2, 8, 44, 40} /* scalar */})
      for (bool mask : {false, true}) {
        const int slots = experts + 6;
        const auto [table, rows] = routing_of(tokens, experts, slots);
        const auto x = randn(std::size_t(tokens) * hidden), attn = randn(std::size_t(tokens) * in);
        const auto wo = randn_bf16(std::size_t(hidden) * in, 0.05f), bo = randn_bf16(std::size_t(hidden), 0.1f);
        const auto norm = randn_bf16(std::size_t(hidden), 0.2f, 1.0f), router = randn_bf16(std::size_t(experts) * hidden, 0.05f);
        const std::size_t P = std::size_t(tokens) * k;
        const std::int64_t stride = 96;
        Dev<bf16_t> base(std::size_t(slots) * stride), dnorm(norm), drouter(router), dwo(wo), dbo(bo);
        Dev<std::int32_t> drows(rows), dtable(table);
        Dev<float> dattn(attn);
        Dev<unsigned> counter(1);
        const std::vector<float> no_logits(std::size_t(tokens) * experts);
        const NormRouter nr{dnorm.p, 1e-5f, drouter.p, hidden};
        Dev<float> xa(x);
        Routed a(no_logits, std::size_t(tokens) * hidden, P, slots);
        CHECK_LAUNCH(linear_cuda(dattn.p, tokens, in, dwo.p, hidden, dbo.p, true, xa.p, nullptr));
        CHECK_LAUNCH(norm_route_cuda(xa.p, nr, a.h.p, a.logits.p, mask, true, a.ids.p, a.w.p, drows.p, tokens, k, dtable.p, experts, base.p,
                                     stride, a.g(), nullptr));
        for (int pass = 0; pass < 2; ++pass) {
          Dev<float> xb(x);
          Routed b(no_logits, std::size_t(tokens) * hidden, P, slots);
          const Projection first{dattn.p, in, dwo.p, dbo.p, counter.p};
          CHECK_LAUNCH(norm_route_cuda(xb.p, first, nr, b.h.p, b.logits.p, mask, true, b.ids.p, b.w.p, drows.p, tokens, k, dtable.p, experts,
                                       base.p, stride, b.g(), nullptr));
          SYNCED();
          const QString where = QStringLiteral("tokens %1 k %2 experts %3 hidden %4 in %5 mask %6 pass %7")
                                    .arg(tokens).arg(k).arg(experts).arg(hidden).arg(in).arg(mask).arg(pass);
          QCOMPARE(counter.get(), std::vector<unsigned>{0u});
          QVERIFY2(rel(xb.get(), xa.get()) < 1e-6, qPrintable(where));
          QVERIFY2(rel(b.h.get(), a.h.get()) < 1e-5, qPrintable(where));
          const auto la = a.logits.get(), lb = b.logits.get();  // masked alike: −inf where masked
          for (std::size_t i = 0; i < la.size(); ++i)
            QVERIFY2(la[i] == lb[i] || std::abs(la[i] - lb[i]) <= 1e-4f * std::max(1.0f, std::abs(la[i])), qPrintable(where));
          QVERIFY2(a.ids.get() == b.ids.get(), qPrintable(where));
          QVERIFY2(rel(b.w.get(), a.w.get()) < 1e-4, qPrintable(where));
          QCOMPARE(b.groups.get()[0], a.groups.get()[0]);
          QCOMPARE(b.misses.get()[0], a.misses.get()[0]);
          QVERIFY2(a.pos_of.get() == b.pos_of.get(), qPrintable(where));
          QVERIFY2(a.pair_at.get() == b.pair_at.get(), qPrintable(where));
        }
      }
    // More tokens than the fused projection takes, or no counter, are refused.
    Dev<float> f(64 * 16);
    Dev<std::int32_t> i(64);
    Dev<unsigned> counter(1);
    const NormRouter nr{nullptr, 1e-5f, nullptr, 64};
    QCOMPARE(norm_route_cuda(f.p, Projection{f.p, 64, nullptr, nullptr, counter.p}, nr, f.p, f.p, false, false, i.p, f.p, i.p, 9, 2, i.p, 8,
                             nullptr, 1, GroupedPairs{}, nullptr),
             int(cudaErrorInvalidValue));
    QCOMPARE(norm_route_cuda(f.p, Projection{f.p, 64, nullptr, nullptr, nullptr}, nr, f.p, f.p, false, false, i.p, f.p, i.p, 1, 2, i.p, 8,
                             nullptr, 1, GroupedPairs{}, nullptr),
             int(cudaErrorInvalidValue));
  }

  void pagedAttentionMatchesReference() {
    // Three sequences in shuffled blocks of 4 positions: a prompt chunk of 5 after 6 cached, and two
    // decode tokens at positions 0 and 10.
    const int heads = 4, kvh = 2, hd = 32, bt = 4, pool_blocks = 12;
    std::vector<std::int32_t> blocks{7, 2, 9, 0, 5, 11, 3, 1, 6};  // seq 0: 7 2 9; seq 1: 0; seq 2: 5 11 3
    std::vector<std::int32_t> position, block_offset;
    for (int p = 6; p < 11; ++p) { position.push_back(p); block_offset.push_back(0); }
    position.push_back(0); block_offset.push_back(3);
    position.push_back(10); block_offset.push_back(4);
    const int tokens = int(position.size());
    const std::size_t width = std::size_t(kvh) * hd, rows = std::size_t(pool_blocks) * bt;
    // The cache already holds every earlier position of every sequence.
    std::vector<bf16_t> kc = randn_bf16(rows * width), vc = randn_bf16(rows * width);
    const auto q = randn(std::size_t(tokens) * heads * hd), k = randn(std::size_t(tokens) * width), v = randn(std::size_t(tokens) * width);
    Dev<std::int32_t> dpos(position), doff(block_offset), dblocks(blocks);
    Dev<bf16_t> dk(kc), dv(vc);
    Dev<float> dq(q), dkn(k), dvn(v), dout(std::size_t(tokens) * heads * hd);
    const PagedQueries pq{dpos.p, doff.p, dblocks.p, bt};
    CHECK_LAUNCH(kv_write_cuda(dkn.p, dvn.p, pq, tokens, kvh, hd, dk.p, dv.p, nullptr));
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, 11, dk.p, dv.p, dout.p, false, nullptr));
    SYNCED();
    const PagedQueries hq{position.data(), block_offset.data(), blocks.data(), bt};
    kv_write_reference(k.data(), v.data(), hq, tokens, kvh, hd, kc.data(), vc.data());
    QCOMPARE(dk.get(), kc);
    QCOMPARE(dv.get(), vc);
    std::vector<float> expect(std::size_t(tokens) * heads * hd);
    paged_attention_reference(q.data(), hq, tokens, heads, kvh, hd, kc.data(), vc.data(), expect.data());
    QVERIFY(rel(dout.get(), expect) < 1e-5);
    // At the most positions a launch may declare: the scores' shared memory the attribute allows.
    Dev<float> most(std::size_t(tokens) * heads * hd);
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, kMaxAttentionPositions, dk.p, dv.p, most.p, false, nullptr));
    SYNCED();
    QVERIFY(rel(most.get(), expect) < 1e-5);
    // Too long a context is refused, not overrun.
    QVERIFY(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, kMaxAttentionPositions + 1, dk.p, dv.p, dout.p, false, nullptr) != 0);
  }

  void splitDecodeAttentionMatchesReference_data() {
    QTest::addColumn<int>("hd");
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("longest");   // the first sequence's positions
    QTest::addColumn<int>("declared");  // the launch's max_positions
    QTest::addColumn<int>("chunk");     // that sequence's last tokens as one prompt chunk (a tile), or its decode token
    QTest::addColumn<int>("eighths");   // of attention_split_bytes given as scratch
    QTest::newRow("head_dim 128") << 128 << 8 << 3000 << 4096 << 1 << 8;
    QTest::newRow("head_dim 288 (the records in two passes)") << 288 << 8 << 3000 << 4096 << 1 << 8;
    QTest::newRow("head_dim 66 (lanes own unequal dims)") << 66 << 8 << 3000 << 4096 << 1 << 8;
    QTest::newRow("head_dim 128, an eighth of the scratch (fewer blocks)") << 128 << 8 << 3000 << 4096 << 1 << 8 / 8;
    // Over 32 parts: the combine's second pass over its lanes.
    QTest::newRow("two heads, 9000 positions, the most declared") << 64 << 2 << 9000 << kMaxAttentionPositions << 1 << 8;
    // A 32-token prompt chunk goes to the tiled kernel; the decode tokens beside it split.
    QTest::newRow("beside a tiled prompt chunk") << 128 << 4 << 3000 << 4096 << 32 << 8;
  }

  void splitDecodeAttentionMatchesReference() {
    // Query tokens of three sequences: the last `chunk` of `longest` positions (split over many
    // blocks, or a tile), then decode tokens at 130 positions (two blocks, the second of two
    // positions) and at 5 (one block, which writes its output itself), in shuffled blocks of 16.
    // Split, twice (the counters the first launch leaves must serve the second), and unsplit: all
    // three equal the reference.
    QFETCH(int, hd);
    QFETCH(int, heads);
    QFETCH(int, longest);
    QFETCH(int, declared);
    QFETCH(int, chunk);
    QFETCH(int, eighths);
    const int kvh = std::min(2, heads), bt = 16;
    const std::vector<int> lengths{longest, 130, 5};
    std::vector<std::int32_t> position, block_offset, blocks;
    for (std::size_t sq = 0; sq < lengths.size(); ++sq) {
      const int len = lengths[sq];
      for (int p = sq == 0 ? len - chunk : len - 1; p < len; ++p) {
        position.push_back(p);
        block_offset.push_back(std::int32_t(blocks.size()));
      }
      for (int b = 0; b < (len + bt - 1) / bt; ++b) blocks.push_back(std::int32_t(blocks.size()));
    }
    std::mt19937 shuffle(7);
    std::shuffle(blocks.begin(), blocks.end(), shuffle);
    const int tokens = int(position.size());
    const std::size_t width = std::size_t(kvh) * hd, rows = blocks.size() * bt;
    const std::vector<bf16_t> kc = randn_bf16(rows * width), vc = randn_bf16(rows * width);
    const auto q = randn(std::size_t(tokens) * heads * hd);
    Dev<std::int32_t> dpos(position), doff(block_offset), dblocks(blocks);
    Dev<bf16_t> dk(kc), dv(vc);
    const std::size_t out_size = std::size_t(tokens) * heads * hd;
    Dev<float> dq(q), first(out_size), second(out_size), plain(out_size);
    const std::size_t full = attention_split_bytes(hd);
    QVERIFY2(full > 0, "no scratch size: the SM count could not be read");
    Dev<unsigned char> scratch(full);  // zeroed, as the backend zeroes it once
    const AttentionSplit split{scratch.p, full * std::size_t(eighths) / 8};
    const int splits = attention_splits(tokens, heads, hd, declared, split);
    QVERIFY2(splits >= 2, qPrintable(QStringLiteral("%1 blocks per pair: the launch does not split").arg(splits)));
    QCOMPARE(attention_splits(tokens, heads, hd, declared, {}), 1);
    QCOMPARE(attention_splits(tokens, 64 * heads, hd, declared, split), 1);  // pairs enough to fill the device
    const PagedQueries pq{dpos.p, doff.p, dblocks.p, bt};
    const bool tiled = chunk >= kMinTileQueries;
    if (tiled) QVERIFY(is_query_tile(position.data(), block_offset.data(), tokens, 0));
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, declared, dk.p, dv.p, first.p, tiled, nullptr, split));
    // The second launch also asks the L2 for ranges (the cache's, one not 16-byte aligned): a hint
    // that changes nothing it computes.
    const L2Prefetch next = L2Prefetch{}.add(dk.p, kc.size() * sizeof(bf16_t)).add(reinterpret_cast<const char*>(dv.p) + 6, 4000);
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, declared, dk.p, dv.p, second.p, tiled, nullptr, split, next));
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, declared, dk.p, dv.p, plain.p, tiled, nullptr));
    SYNCED();
    const PagedQueries hq{position.data(), block_offset.data(), blocks.data(), bt};
    std::vector<float> expect(out_size);
    paged_attention_reference(q.data(), hq, tokens, heads, kvh, hd, kc.data(), vc.data(), expect.data());
    for (const auto* got : {&first, &second, &plain}) {
      const auto g = got->get();
      for (int t = 0; t < tokens; ++t) {  // token by token: a part left out or added twice shows in its own row
        const std::size_t at = std::size_t(t) * heads * hd, n = std::size_t(heads) * hd;
        const std::vector<float> a(g.begin() + at, g.begin() + at + n), b(expect.begin() + at, expect.begin() + at + n);
        QVERIFY2(rel(a, b) < 1e-5, qPrintable(QStringLiteral("token %1 (position %2): %3").arg(t).arg(position[std::size_t(t)]).arg(rel(a, b))));
      }
    }
    // The counters are zero again: the scratch is ready for a graph's next replay.
    const auto left = scratch.get();
    QVERIFY(std::all_of(left.begin(), left.begin() + std::ptrdiff_t(sizeof(unsigned)) * tokens * heads, [](unsigned char c) { return c == 0; }));
  }

  void tiledPromptAttentionMatchesReference_data() {
    QTest::addColumn<int>("hd");
    QTest::addColumn<bool>("fresh_first");
    QTest::newRow("head_dim 128 (the tiled kernel's most)") << 128 << false;
    QTest::newRow("head_dim 40") << 40 << false;
    QTest::newRow("head_dim 64 (tensor cores)") << 64 << false;
    QTest::newRow("head_dim 64, a fresh prompt first") << 64 << true;
    QTest::newRow("head_dim 66 (lanes own unequal dims)") << 66 << false;
    QTest::newRow("head_dim 160 (token by token only)") << 160 << false;
    QTest::newRow("head_dim 288 (token by token, the value sums in two passes)") << 288 << false;
    QTest::newRow("head_dim 128, a fresh prompt first") << 128 << true;
  }

  void tiledPromptAttentionMatchesReference() {
    // A 75-token prompt chunk after 20 cached positions (a), two decode tokens (b, b2) and a fresh
    // 40-token prompt (c), in shuffled blocks of 16. In the order a b b2 c, tiles [0, 32), [32, 64)
    // and the partial [96, 117) go to the tiled kernel (tst_cuda_plan checks which); in the order
    // c a b b2, [0, 32) (positions 0-31) and [64, 96). The rest go token by token. Both ways equal
    // the reference.
    QFETCH(int, hd);
    QFETCH(bool, fresh_first);
    const int heads = 8, kvh = 2, bt = 16, pool_blocks = 12;
    const std::vector<std::int32_t> blocks{4, 0, 6, 2, 9, 7, 1, 10, 3, 5, 8};  // a: 6 blocks; b: 1; b2: 1; c: 3
    std::vector<std::int32_t> position, block_offset;
    auto prompt_a = [&] { for (int p = 20; p < 95; ++p) { position.push_back(p); block_offset.push_back(0); } };
    auto decodes = [&] {
      position.push_back(7); block_offset.push_back(6);
      position.push_back(3); block_offset.push_back(7);
    };
    auto prompt_c = [&] { for (int p = 0; p < 40; ++p) { position.push_back(p); block_offset.push_back(8); } };
    if (fresh_first) { prompt_c(); prompt_a(); decodes(); }
    else { prompt_a(); decodes(); prompt_c(); }
    const int tokens = int(position.size());
    QCOMPARE(tokens, 117);
    const std::size_t width = std::size_t(kvh) * hd, rows = std::size_t(pool_blocks) * bt;
    std::vector<bf16_t> kc = randn_bf16(rows * width), vc = randn_bf16(rows * width);
    // Each sequence's rows past its last position hold NaNs, as a cache may: no kernel may let them in.
    for (const auto& [offset, last, count] : std::vector<std::tuple<int, int, int>>{{0, 94, 6}, {6, 7, 1}, {7, 3, 1}, {8, 39, 3}})
      for (int p = last + 1; p < count * bt; ++p) {
        const std::size_t row = std::size_t(blocks[std::size_t(offset + p / bt)]) * bt + std::size_t(p % bt);
        std::fill_n(kc.begin() + std::ptrdiff_t(row * width), width, bf16_t(0x7fc0));
        std::fill_n(vc.begin() + std::ptrdiff_t(row * width), width, bf16_t(0x7fc0));
      }
    const auto q = randn(std::size_t(tokens) * heads * hd), k = randn(std::size_t(tokens) * width), v = randn(std::size_t(tokens) * width);
    Dev<std::int32_t> dpos(position), doff(block_offset), dblocks(blocks);
    Dev<bf16_t> dk(kc), dv(vc);
    Dev<float> dq(q), dkn(k), dvn(v), tiled(std::size_t(tokens) * heads * hd), plain(std::size_t(tokens) * heads * hd),
        tensor(std::size_t(tokens) * heads * hd);
    const PagedQueries pq{dpos.p, doff.p, dblocks.p, bt};
    CHECK_LAUNCH(kv_write_cuda(dkn.p, dvn.p, pq, tokens, kvh, hd, dk.p, dv.p, nullptr));
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, 95, dk.p, dv.p, tiled.p, true, nullptr));
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, 95, dk.p, dv.p, plain.p, false, nullptr));
    CHECK_LAUNCH(paged_attention_cuda(dq.p, pq, tokens, heads, kvh, hd, 95, dk.p, dv.p, tensor.p, true, nullptr, {}, {}, /*tensor_cores=*/true));
    SYNCED();
    const PagedQueries hq{position.data(), block_offset.data(), blocks.data(), bt};
    kv_write_reference(k.data(), v.data(), hq, tokens, kvh, hd, kc.data(), vc.data());
    std::vector<float> expect(std::size_t(tokens) * heads * hd);
    paged_attention_reference(q.data(), hq, tokens, heads, kvh, hd, kc.data(), vc.data(), expect.data());
    QVERIFY2(rel(plain.get(), expect) < 1e-5, qPrintable(QString::number(rel(plain.get(), expect))));
    QVERIFY2(rel(tiled.get(), expect) < 1e-5, qPrintable(QString::number(rel(tiled.get(), expect))));
    // Every row of every tile, not only the total: a tile row left unwritten or misplaced shows here.
    const auto got = tiled.get();
    for (int t = 0; t < tokens; ++t) {
      const std::size_t at = std::size_t(t) * heads * hd, n = std::size_t(heads) * hd;
      const std::vector<float> a(got.begin() + at, got.begin() + at + n), b(expect.begin() + at, expect.begin() + at + n);
      QVERIFY2(rel(a, b) < 1e-4, qPrintable(QStringLiteral("token %1: %2").arg(t).arg(rel(a, b))));
    }
    // On tensor cores where the head size allows (the queries and the softmax's weights in bf16), and
    // as the tiles above where it does not.
    const bool on_tensor_cores = tensor_core_tiles(hd, bt);
    const auto tc = tensor.get();
    for (int t = 0; t < tokens; ++t) {
      const std::size_t at = std::size_t(t) * heads * hd, n = std::size_t(heads) * hd;
      const std::vector<float> a(tc.begin() + at, tc.begin() + at + n), b(expect.begin() + at, expect.begin() + at + n);
      QVERIFY2(rel(a, b) < (on_tensor_cores ? 2e-2 : 1e-4), qPrintable(QStringLiteral("tensor cores, token %1: %2").arg(t).arg(rel(a, b))));
    }
    if (on_tensor_cores) QVERIFY2(rel(tc, expect) > 1e-6, "the tensor-core tiles computed in fp32: were they taken?");
  }
};

MOSAIC_GPU_TEST_MAIN(TestCudaKernels)
#include "tst_cuda_kernels.moc"
