// Deltas across fine-tunes with DeltaMoE's codec (model/delta_codec, docs/delta-format.md): the packing as the
// format document states it, the 2:4 structure, the quantization bound, and refusals of damaged packs.
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "model/delta_codec.h"
#include "runtime/capacity.h"
#include "analysis/delta_folder.h"
#include "analysis/cross_distance.h"
#include "analysis/delta_gptq.h"
#include "analysis/delta_within.h"
#include "common/error.h"
#include "analysis/expert_distance.h"
#include "analysis/family_analysis.h"
#include "model/variant_folders.h"
#include "runtime/backend.h"
#include "runtime/delta_view.h"
#include "runtime/engine.h"
#include "runtime/forward.h"
#include "serving/hybrid_plan.h"
#include "serving/session.h"
#include "serving/strategy.h"
#include "model/delta_config.h"
#include "model/dtype_convert.h"
#include "model/safetensors.h"
#include "runtime/runtime.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;
namespace fs = std::filesystem;

namespace {

float f16(std::uint16_t h) {
  float f = 0;
  to_float(DType::F16, reinterpret_cast<const std::byte*>(&h), std::span<float>(&f, 1));
  return f;
}

// A fine-tune's delta: small, with a few larger weights, and a row of zeros (untouched weights).
std::vector<float> delta_like(std::int64_t rows, std::int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> small(0.0f, 0.01f);
  std::vector<float> d(static_cast<std::size_t>(rows * cols));
  for (auto& x : d) x = small(rng);
  for (std::size_t i = 0; i < d.size(); i += 37) d[i] *= 20.0f;
  std::fill(d.begin(), d.begin() + cols, 0.0f);
  return d;
}

// The format document's reading, written apart from the codec: value k of a row sits in word
// k / (32 / bits) at bit (k mod (32 / bits)) · bits; its place in its four in meta word k / 16 at
// bit (k mod 16) · 2; its column (k / 2) · 4 + place (dense: k); its group column / group.
float documented_value(const PackedDelta& p, const DeltaFormat& f, std::int64_t r, std::int64_t c) {
  const std::int64_t per = 32 / f.bits, kept = f.sparse24 ? p.cols / 2 : p.cols;
  const std::int64_t vw = (kept + per - 1) / per, mw = f.sparse24 ? (kept + 15) / 16 : 0, groups = (p.cols + f.group - 1) / f.group;
  for (std::int64_t k = 0; k < kept; ++k) {
    std::int64_t col = k;
    if (f.sparse24) col = (k / 2) * 4 + ((p.meta[static_cast<std::size_t>(r * mw + k / 16)] >> ((k % 16) * 2)) & 3u);
    if (col != c) continue;
    const std::uint32_t q = (p.qweight[static_cast<std::size_t>(r * vw + k / per)] >> ((k % per) * f.bits)) & ((1u << f.bits) - 1);
    const std::size_t g = static_cast<std::size_t>(r * groups + c / f.group);
    return (static_cast<float>(q) - p.zeros[g]) * f16(p.scales[g]);
  }
  return 0.0f;
}

const DeltaFormat kFormats[] = {{4, true, 128}, {4, false, 128}, {2, true, 128}, {2, true, 32}, {4, false, 48}};

}  // namespace

class DeltaTest : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void packing_reads_as_the_format_document_says() {
    for (const DeltaFormat& f : kFormats) {
      const std::int64_t rows = 5, cols = 96;
      const PackedDelta p = compress_delta(delta_like(rows, cols, 1), rows, cols, f);
      check_packed(p, f, "delta");
      QCOMPARE(static_cast<std::uint64_t>(4 * (p.qweight.size() + p.meta.size()) + 3 * p.scales.size()), packed_bytes(f, rows, cols));
      std::vector<float> out(static_cast<std::size_t>(rows * cols));
      expand_delta(p, f, out);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) QCOMPARE(out[static_cast<std::size_t>(r * cols + c)], documented_value(p, f, r, c));
    }
  }

  void two_of_every_four_are_kept_and_they_are_the_largest() {
    const DeltaFormat f{4, true, 128};
    const std::int64_t rows = 8, cols = 256;
    const auto d = delta_like(rows, cols, 2);
    const PackedDelta p = compress_delta(d, rows, cols, f);
    std::vector<float> out(d.size());
    expand_delta(p, f, out);
    for (std::size_t four = 0; four < d.size(); four += 4) {
      int nonzero = 0;
      for (std::size_t i = four; i < four + 4; ++i) nonzero += out[i] != 0.0f;
      QVERIFY(nonzero <= 2);
      // What is kept is among the two largest magnitudes of the four.
      std::vector<float> mags;
      for (std::size_t i = four; i < four + 4; ++i) mags.push_back(std::abs(d[i]));
      std::sort(mags.begin(), mags.end());
      for (std::size_t i = four; i < four + 4; ++i)
        if (out[i] != 0.0f) QVERIFY2(std::abs(d[i]) >= mags[2], qPrintable(QStringLiteral("weight %1 kept over a larger one").arg(i)));
    }
  }

  void quantization_error_is_within_a_step() {
    // Every kept weight lies within one step (its group's scale) of its code: half a step from
    // rounding, at most half a step more where the zero point's rounding clamps an extreme.
    for (const DeltaFormat& f : kFormats) {
      const std::int64_t rows = 6, cols = 192;
      const auto d = delta_like(rows, cols, 3);
      const PackedDelta p = compress_delta(d, rows, cols, f);
      std::vector<float> out(d.size());
      expand_delta(p, f, out);
      const std::int64_t groups = group_count(f, cols);
      double err = 0, norm = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          norm += d[i] * d[i];
          err += (d[i] - out[i]) * (d[i] - out[i]);
          if (out[i] == 0.0f && f.sparse24) continue;  // pruned (or a kept zero)
          const float step = f16(p.scales[static_cast<std::size_t>(r * groups + c / f.group)]);
          QVERIFY2(std::abs(d[i] - out[i]) <= step * 1.0001f, qPrintable(QStringLiteral("%1 bits: %2 came back %3, step %4").arg(f.bits).arg(d[i]).arg(out[i]).arg(step)));
        }
      // An untouched row (all zeros) comes back exactly.
      for (std::int64_t c = 0; c < cols; ++c) QCOMPARE(out[static_cast<std::size_t>(c)], 0.0f);
      qInfo("%d-bit %s group %lld: relative error %.4f", f.bits, f.sparse24 ? "2:4" : "dense", static_cast<long long>(f.group), std::sqrt(err / norm));
    }
  }

  void gptq_with_a_scaled_identity_hessian_is_plain_rounding() {
    // No correlation between inputs, all alike: nothing to compensate, so the packs are byte for byte
    // compress_delta's (the masks, grids and codes are decided the same way).
    for (const DeltaFormat& f : kFormats) {
      const std::int64_t rows = 12, cols = 192;
      const std::vector<float> d = delta_like(rows, cols, 9);
      std::vector<double> h(static_cast<std::size_t>(cols * cols), 0.0);
      for (std::int64_t c = 0; c < cols; ++c) h[static_cast<std::size_t>(c * cols + c)] = 3.0;
      const PackedDelta plain = compress_delta(d, rows, cols, f), gptq = compress_delta_gptq(d, rows, cols, f, h);
      QVERIFY(plain.qweight == gptq.qweight && plain.meta == gptq.meta && plain.scales == gptq.scales && plain.zeros == gptq.zeros);
    }
  }

  void gptq_lowers_the_error_on_correlated_inputs() {
    // Inputs whose columns are correlated (as hidden states are): GPTQ's packs make a smaller output
    // error X·(Δ − Δ̂)ᵀ than rounding alone — at groups of 32, less than half — and never a larger one.
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::int64_t rows = 24, cols = 128, n = 512, rank = 16;
    std::vector<float> mix(static_cast<std::size_t>(rank * cols)), x(static_cast<std::size_t>(n * cols));
    for (float& v : mix) v = normal(rng);
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<float> z(static_cast<std::size_t>(rank));
      for (float& v : z) v = normal(rng);
      for (std::int64_t c = 0; c < cols; ++c) {
        float acc = 0.1f * normal(rng);
        for (std::int64_t k = 0; k < rank; ++k) acc += z[static_cast<std::size_t>(k)] * mix[static_cast<std::size_t>(k * cols + c)];
        x[static_cast<std::size_t>(t * cols + c)] = acc;
      }
    }
    std::vector<double> h(static_cast<std::size_t>(cols * cols), 0.0);
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t i = 0; i < cols; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          h[static_cast<std::size_t>(i * cols + j)] += static_cast<double>(x[static_cast<std::size_t>(t * cols + i)]) * x[static_cast<std::size_t>(t * cols + j)];
    const std::vector<float> d = delta_like(rows, cols, 3);
    for (const DeltaFormat& f : {DeltaFormat{4, true, 32}, DeltaFormat{2, true, 32}, DeltaFormat{4, false, 32}, DeltaFormat{2, true, 128}}) {
      auto output_error = [&](const PackedDelta& p) {
        check_packed(p, f, "delta");
        std::vector<float> e(d.size());
        expand_delta(p, f, e);
        for (std::size_t k = 0; k < e.size(); ++k) e[k] = d[k] - e[k];
        return output_error_sq(e, rows, cols, h);
      };
      const double plain = output_error(compress_delta(d, rows, cols, f)), gptq = output_error(compress_delta_gptq(d, rows, cols, f, h));
      qInfo("%d-bit %s group %lld: output error %.4g rounded, %.4g with GPTQ (%.2f×)", f.bits, f.sparse24 ? "2:4" : "dense",
            static_cast<long long>(f.group), plain, gptq, plain / gptq);
      QVERIFY2(gptq <= plain, qPrintable(QStringLiteral("%1 against %2").arg(gptq).arg(plain)));
      if (f.group == 32) QVERIFY2(gptq < 0.5 * plain, qPrintable(QStringLiteral("%1 against %2").arg(gptq).arg(plain)));
    }
  }

  void calibration_compresses_against_the_variants_own_inputs() {
    // ft1's expert inputs on a calibration text: every token reaches top-k experts per MoE layer, the
    // statistics are symmetric, and a folder compressed against them is closer to ft1 on that text
    // than one compressed by rounding alone.
    const Checkpoint base(fixture("olmoe", "base")), ft1(fixture("olmoe", "ft1"));
    const auto model = Model::load(ft1);
    const ModelSpec& s = model->spec();
    const std::vector<std::int64_t> ids = prompt_of(300, 77, s.vocab_size);
    const ExpertHessians h = ExpertHessians::collect(*model, ids, 100, std::uint64_t(1) << 30);
    QCOMPARE(h.calibration_tokens(), std::int64_t(300));
    for (std::int64_t l = 0; l < s.num_layers; ++l) {
      std::int64_t routed = 0;
      for (std::int64_t e = 0; e < s.num_experts; ++e) routed += h.tokens(l, e);
      QCOMPARE(routed, 300 * s.top_k);
    }
    for (std::int64_t e = 0; e < s.num_experts; ++e)
      if (h.tokens(0, e) > 0) {
        const auto hd = h.of(0, e, ExpertRole::Down);
        const auto w = static_cast<std::size_t>(s.expert_intermediate);
        QCOMPARE(hd.size(), w * w);
        QCOMPARE(hd[1 * w + 5], hd[5 * w + 1]);
        QVERIFY(hd[3 * w + 3] > 0);
      }
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    const DeltaFormat f{2, true, 32};
    const DeltaReport plain = write_delta(base, ft1, f, dir / "plain");
    const DeltaReport calibrated = write_delta(base, ft1, f, dir / "gptq", &h);
    int n = 0, of = 0;
    for (const DeltaLayerReport& l : calibrated.layers) {
      n += l.calibrated;
      of += l.matrices;
    }
    QVERIFY2(n > 0 && of == s.num_sparse_layers() * s.num_experts * 3, qPrintable(QStringLiteral("%1 of %2").arg(n).arg(of)));
    QCOMPARE(calibrated.folder_bytes, plain.folder_bytes);  // the same format, the same bytes
    for (const char* v : {"plain", "gptq"}) write_expanded(dir / v, dir / (std::string("x-") + v));
    auto logits = [&](const Model& m) {
      KvCache cache(m.spec(), 1, static_cast<std::int64_t>(ids.size()));
      return forward(m, cache, ids, LogitsFor::AllPositions).values;
    };
    const std::vector<float> want = logits(*model);
    const double e_plain = relative_error(logits(*Model::load(Checkpoint(dir / "x-plain"))), want),
                 e_gptq = relative_error(logits(*Model::load(Checkpoint(dir / "x-gptq"))), want);
    qInfo("logits on the calibration text: relative error %.4g rounded, %.4g calibrated", e_plain, e_gptq);
    QVERIFY2(e_gptq < e_plain, qPrintable(QStringLiteral("%1 against %2").arg(e_gptq).arg(e_plain)));
    // Statistics past the memory allowed are refused before they are allocated.
    expect_mentions(error_of<InvalidArgument>([&] { ExpertHessians::collect(*model, ids, 100, 1000); }), {"--calibration", "without --calibration"});
  }

  void a_delta_folder_expands_to_its_base_plus_the_packed_deltas() {
    // hf-tiny olmoe: ft1 is a fine-tune of base. The expanded checkpoint keeps ft1's non-expert
    // tensors byte for byte, and each expert is base + Δ̂, within one quantization step (or the
    // pruned weight) of ft1's.
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    const Checkpoint base(fixture("olmoe", "base")), variant(fixture("olmoe", "ft1"));
    const DeltaFormat f{4, true, 32};
    const DeltaReport report = write_delta(base, variant, f, dir / "ft1-delta");
    QCOMPARE(report.layers.size(), std::size_t(base.spec().num_layers));
    QVERIFY(report.folder_bytes < report.variant_bytes);
    QCOMPARE(read_delta_config(dir / "ft1-delta" / kDeltaCfgFile).format.group, std::int64_t(32));
    write_expanded(dir / "ft1-delta", dir / "ft1-dense");
    const Checkpoint dense(dir / "ft1-dense");
    double err = 0, delta = 0;
    for (const Weight& w : variant.weights()) {
      const Weight& x = dense.weight(w.expected.name);
      if (!w.expected.is_expert()) {
        QVERIFY2(std::ranges::equal(x.data(), w.data()), w.expected.name.c_str());
        continue;
      }
      QCOMPARE(x.dtype, DType::F32);
      std::vector<float> v(static_cast<std::size_t>(w.info->numel())), b(v.size()), got(v.size());
      to_float(w.dtype, w.data().data(), v);
      to_float(base.weight(w.expected.name).dtype, base.weight(w.expected.name).data().data(), b);
      to_float(x.dtype, x.data().data(), got);
      for (std::size_t i = 0; i < v.size(); ++i) {
        err += (v[i] - got[i]) * (v[i] - got[i]);
        delta += (v[i] - b[i]) * (v[i] - b[i]);
      }
    }
    QVERIFY2(err < delta, qPrintable(QStringLiteral("error %1 against delta %2").arg(err).arg(delta)));  // closer to ft1 than the base is
    double report_err = 0;
    for (const DeltaLayerReport& l : report.layers) report_err += l.error_sq;
    QVERIFY2(std::abs(report_err - err) <= 1e-4 * err, qPrintable(QStringLiteral("%1 reported, %2 measured").arg(report_err).arg(err)));
    // The folder opens as a checkpoint over its base, and means what it expands to.
    const Checkpoint opened(dir / "ft1-delta");
    QVERIFY(opened.is_delta() && !opened.is_adapter());
    QCOMPARE(fs::canonical(opened.base_dir()), fs::canonical(base.dir()));
    QVERIFY(opened.unused_tensors().empty());  // the packs are accounted for
    for (const Weight& w : dense.weights()) {
      std::vector<float> want(static_cast<std::size_t>(w.info->numel())), got(want.size());
      to_float(w.dtype, w.data().data(), want);
      const WeightFloats floats(opened, opened.weight(w.expected.name));
      for (std::size_t off = 0; off < got.size(); off += 100)  // in ranges that split rows
        floats.read(off, std::span(got).subspan(off, std::min<std::size_t>(100, got.size() - off)));
      QVERIFY2(want == got, w.expected.name.c_str());
    }
  }

  void deltas_within_one_model_are_served_over_its_medoids() {
    // DeltaMoE's own setting on hf-tiny olmoe's ft1: each layer's medoid is the base of the layer's
    // other experts. The family folder serves as its expansion, the medoid held once a layer.
    QTemporaryDir tmp;
    const fs::path out = fs::path(tmp.path().toStdString()) / "within";
    const Checkpoint variant(fixture("olmoe", "ft1"));
    const ModelSpec& s = variant.spec();
    const WithinReport w = write_delta_within(variant, {4, false, 32}, out);
    QCOMPARE(read_delta_config(w.delta_dir / kDeltaCfgFile).base_model, fs::path("../medoid-base"));
    // The medoid: no other expert of its layer is nearer to the others, summed.
    for (std::int64_t l = 0; l < s.num_layers; ++l) {
      if (!s.is_sparse(l)) continue;
      const auto d = cross_position_distances(variant, variant, l).value();
      std::vector<double> sums(d.size(), 0.0);
      for (std::size_t a = 0; a < d.size(); ++a)
        for (std::size_t b = 0; b < d.size(); ++b) sums[a] += d.at(a, b);
      const std::int64_t m = w.medoids[static_cast<std::size_t>(l)];
      QVERIFY(m >= 0 && m < s.num_experts);
      QCOMPARE(sums[static_cast<std::size_t>(m)], *std::min_element(sums.begin(), sums.end()));
    }
    write_expanded(w.delta_dir, out.parent_path() / "expanded");
    const auto expanded = Model::load(Checkpoint(out.parent_path() / "expanded"));

    Family family;
    open_family(family, {out});  // a family folder: the base and the delta folder over it
    QCOMPARE(family.size(), std::size_t(2));
    const HostStore store(family);
    const int b = store.index("medoid-base"), d = store.index(w.delta_dir.filename().string());
    QVERIFY(b >= 0 && store.is_delta(d) && store.base_of(d) == b);
    std::vector<PinnedExpert> pins;
    for (std::int64_t l = 0; l < s.num_layers; ++l) {
      if (!s.is_sparse(l)) continue;
      const std::int64_t m = w.medoids[static_cast<std::size_t>(l)];
      for (std::int64_t e = 0; e < s.num_experts; ++e) QCOMPARE(store.expert(b, l, e), store.expert(b, l, m));  // one expert a layer
      pins.push_back({l, m, b});
      for (std::int64_t e = 0; e < s.num_experts; ++e)
        if (store.source(d, l, e).kind == ExpertSource::Kind::Delta) pins.push_back({l, e, d});
    }
    auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = pins, .hit = HitPolicy::Strict, .miss = "lru"});
    std::uint64_t dense = 0;
    for (const DeviceItem& item : rt->device_items())
      if (item.name.starts_with("expert slots")) dense += item.bytes;
    QCOMPARE(dense, store.expert_bytes() * static_cast<std::uint64_t>(s.num_sparse_layers()));  // the medoids alone, dense
    Engine engine(rt);
    const std::vector<std::int64_t> ids = prompt_of(9, 1, s.vocab_size);
    const RequestResult r = engine.submit({store.name(d), {.prompt = ids, .max_new_tokens = 0}, true})->wait();
    KvCache cache(expanded->spec(), 1, static_cast<std::int64_t>(ids.size()));
    const auto want = forward(*expanded, cache, ids, LogitsFor::AllPositions).values;
    QVERIFY2(relative_error(r.logits.values, want) <= 1e-5, qPrintable(QString::number(relative_error(r.logits.values, want))));
    QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));

    // A folder in the way, or a delta folder as the variant, is refused; nothing is left behind.
    expect_mentions(error_of<InvalidArgument>([&] { write_delta_within(variant, {4, false, 32}, out); }), {"not an empty folder"});
    expect_mentions(error_of<InvalidArgument>([&] { write_delta_within(Checkpoint(w.delta_dir), {4, false, 32}, out.parent_path() / "again"); }),
                    {"not a full checkpoint"});
    QVERIFY(!fs::exists(out.parent_path() / "again"));
  }

  void the_runtime_serves_delta_folders_as_their_expansions() {
    // Two delta folders over one base, served beside it: each request's logits equal the expanded
    // checkpoint's, alone and in one mixed batch, with pinned and loaded delta experts; the store
    // holds the base's experts once, and each delta's packed arrays beside them.
    for (const std::string& fam : families()) {
      QTemporaryDir tmp;
      const fs::path dir = tmp.path().toStdString();
      const DeltaFormat f{4, true, 32};
      const Checkpoint base(fixture(fam, "base"));
      std::vector<std::unique_ptr<Model>> expanded;
      for (const char* v : {"ft1", "ft2"}) {
        write_delta(base, Checkpoint(fixture(fam, v)), f, dir / (std::string("d") + v));
        write_expanded(dir / (std::string("d") + v), dir / (std::string("x") + v));
        expanded.push_back(Model::load(Checkpoint(dir / (std::string("x") + v))));
      }
      expanded.insert(expanded.begin(), Model::load(base));
      Family family;
      open_family(family, {dir / "dft1", dir / "dft2"});  // the base joins as the folders name it
      QCOMPARE(family.size(), std::size_t(3));
      const HostStore store(family);
      const int d1 = store.index("dft1"), d2 = store.index("dft2"), b = store.index("base");
      QVERIFY(b >= 0 && store.is_delta(d1) && store.base_of(d1) == b && store.base_of(d2) == b);
      const ModelSpec& s = store.spec();
      std::int64_t deltas = 0;
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l); ++e) {
          if (store.source(d1, l, e).kind != ExpertSource::Kind::Delta) continue;
          ++deltas;
          const HostExpert& x = store.expert_tensors(store.expert(d1, l, e));
          const HostExpert& y = store.expert_tensors(store.expert(b, l, e));
          QVERIFY(x.delta >= 0 && x.gate == y.gate && x.up == y.up && x.down == y.down);  // the base's own tensors
        }
      QVERIFY2(deltas > 0, fam.c_str());

      // Pinned, two ways. Sparse: d1's experts at every third position, the base's at the next, the
      // rest loaded on miss (d1's slots hold base and delta). DeltaMoE's: the base everywhere and
      // every delta expert of both folders in delta-only slots.
      std::vector<PinnedExpert> sparse, weave;
      std::uint64_t delta_pins = 0;
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l); ++e) {
          if (e % 3 < 2) sparse.push_back({l, e, e % 3 == 0 ? d1 : b});
          weave.push_back({l, e, b});
          for (int d : {d1, d2})
            if (store.source(d, l, e).kind == ExpertSource::Kind::Delta) {
              weave.push_back({l, e, d});
              ++delta_pins;
            }
        }
      const std::vector<std::pair<int, std::vector<std::int64_t>>> cases{
          {b, prompt_of(9, 1, s.vocab_size)}, {d1, prompt_of(7, 2, s.vocab_size)}, {d2, prompt_of(11, 3, s.vocab_size)}, {d1, prompt_of(5, 4, s.vocab_size)}};
      auto expected = [&](int target, const std::vector<std::int64_t>& ids) {
        const Model& m = *expanded[static_cast<std::size_t>(target == b ? 0 : target == d1 ? 1 : 2)];
        KvCache cache(m.spec(), 1, static_cast<std::int64_t>(ids.size()));
        return forward(m, cache, ids, LogitsFor::AllPositions).values;
      };
      // Runs: sparse pins with misses kept (lru), or loaded one at a time through a single scratch
      // slot, wave after wave (transient); DeltaMoE's pins. Each alone and batched.
      for (int run = 0; run < 6; ++run) {
        const bool together = run % 2, thin = run >= 4, waves = run / 2 == 1;
        auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = thin ? weave : sparse, .hit = HitPolicy::Strict,
                                                                 .miss = waves ? "transient" : "lru", .resident_sets = 3,
                                                                 .reserve = {.miss_slots = waves ? 1 : -1}});
        std::uint64_t slot_bytes = 0;
        for (const DeviceItem& item : rt->device_items())
          if (item.name.starts_with("delta-only slots")) slot_bytes += item.bytes;
        QCOMPARE(slot_bytes > 0, thin);  // a delta over a pinned base costs its packed bytes only
        QVERIFY(slot_bytes < store.expert_bytes() * delta_pins / 4);
        Engine engine(rt);
        std::vector<ServeRequest> requests;
        for (const auto& [t, ids] : cases) requests.push_back({store.name(t), {.prompt = ids, .max_new_tokens = 0}, true});
        std::vector<std::shared_ptr<RequestHandle>> handles;
        if (together) handles = engine.submit_all(requests);
        else
          for (const ServeRequest& r : requests) {
            handles.push_back(engine.submit(r));
            handles.back()->wait();
          }
        for (std::size_t i = 0; i < cases.size(); ++i) {
          const RequestResult& r = handles[i]->wait();
          const double err = relative_error(r.logits.values, expected(cases[i].first, cases[i].second));
          QVERIFY2(err <= 1e-5, qPrintable(QStringLiteral("%1, %2, %3, request %4: %5").arg(QString::fromStdString(fam)).arg(together ? QStringLiteral("batched") : QStringLiteral("alone")).arg(thin ? QStringLiteral("delta-only slots") : waves ? QStringLiteral("waves of one scratch slot") : QStringLiteral("sparse pins")).arg(i).arg(err)));
          if (thin) QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));  // every expert of every target resident
        }
      }
      // A delta variant differs from its base where its deltas do: the check above can fail.
      QVERIFY(relative_error(expected(d1, cases[1].second), expected(b, cases[1].second)) > 1e-4);

      // Analyses read a delta folder's experts as it means them.
      Family dense;
      for (const char* v : {"base", "xft1"}) dense.add(v, v == std::string("base") ? fixture(fam, "base") : dir / v);
      Family packed;
      packed.add("base", fixture(fam, "base"));
      packed.add("dft1", dir / "dft1");
      const auto da = expert_distances(dense, {}, 1), pa = expert_distances(packed, {}, 1);
      for (std::size_t i = 0; i < da->pairs.size(); ++i)
        if (!std::isnan(da->pairs[i])) QVERIFY(std::abs(da->pairs[i] - pa->pairs[i]) <= 1e-5 * (1 + da->pairs[i]));

      // The CUDA backend takes delta folders too (tst_cuda_backend compares it with this one on a
      // GPU); where no device can run it, it says why instead.
      if (const auto why = device_unavailable(Device::Cuda)) {
        const auto cuda = [&] { make_cuda_backend(store, {.layer_slots = std::vector<std::int64_t>(static_cast<std::size_t>(s.num_layers), 1)}); };
        expect_mentions(error_of<DeviceError>(cuda), {*why, "--device cpu"});
      }
    }
  }

  void the_delta_strategy_pins_packed_deltas_while_the_budget_holds_them() {
    // DeltaMoE as a strategy: the base pinned, both folders' deltas pinned packed; under a budget
    // with room for about half of them, half are pinned and the rest load on miss, and every
    // request still gets its expanded checkpoint's logits.
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    const Checkpoint base(fixture("qwen2_moe", "base"));
    std::vector<std::unique_ptr<Model>> expanded;
    for (const char* v : {"ft1", "ft2"}) {
      write_delta(base, Checkpoint(fixture("qwen2_moe", v)), {4, true, 32}, dir / (std::string("d") + v));
      write_expanded(dir / (std::string("d") + v), dir / (std::string("x") + v));
      expanded.push_back(Model::load(Checkpoint(dir / (std::string("x") + v))));
    }
    Family family;
    open_family(family, {dir / "dft1", dir / "dft2"});
    const HostStore store(family);
    const auto analysis = analyze_family(family);
    auto room_item = [](const Runtime& rt) {
      for (const DeviceItem& item : rt.device_items())
        if (item.name.starts_with("pinned while room")) return item;
      return DeviceItem{};
    };
    StrategyConfig config{.kind = StrategyKind::Delta, .miss = "lru"};
    const Deployment roomy(config, family, store, *analysis, dir);
    QCOMPARE(roomy.targets(), (std::vector<std::string>{"dft1", "dft2"}));
    const Runtime& all = *roomy.partitions().front().runtime;
    const DeviceItem every = room_item(all);
    QVERIFY2(every.name.find(" packed deltas") != std::string::npos && every.bytes > 0, every.name.c_str());
    std::uint64_t total = 0;
    for (const DeviceItem& item : all.device_items())
      if (!item.name.starts_with("spare slots")) total += item.bytes;  // an unlimited budget's spares: one per expert

    config.budget_bytes = total - every.bytes / 2;
    config.reserve = {};  // as the roomy one priced it
    const Deployment tight(config, family, store, *analysis, dir);
    const DeviceItem some = room_item(*tight.partitions().front().runtime);
    QVERIFY2(some.bytes <= every.bytes / 2 + 1 && some.bytes >= every.bytes / 2 - every.bytes / 8, some.name.c_str());
    Engine engine(tight.partitions().front().runtime);
    std::vector<ServeRequest> requests;
    for (int i = 0; i < 4; ++i) requests.push_back({i % 2 ? "dft2" : "dft1", {.prompt = prompt_of(6 + i, 10 + i, 320), .max_new_tokens = 0}, true});
    const auto handles = engine.submit_all(requests);
    std::int64_t misses = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const RequestResult& r = handles[i]->wait();
      const Model& m = *expanded[i % 2];
      KvCache cache(m.spec(), 1, static_cast<std::int64_t>(requests[i].generation.prompt.size()));
      const double err = relative_error(r.logits.values, forward(m, cache, requests[i].generation.prompt, LogitsFor::AllPositions).values);
      QVERIFY2(err <= 1e-5, qPrintable(QString::number(err)));
      misses += r.stats.counters.total().misses;
    }
    QVERIFY(misses > 0);  // what did not fit loads on miss
    // A family without delta folders has nothing for the strategy to serve.
    Family plain;
    plain.add("base", fixture("qwen2_moe", "base"));
    const HostStore plain_store(plain);
    expect_mentions(error_of<InvalidArgument>([&] { Deployment(config, plain, plain_store, *analyze_family(plain), dir); }),
                    {"delta", "delta compress"});
  }

  void the_hybrid_strategy_shares_the_base_at_the_most_similar_positions() {
    // Hybrid with capacity c: the c most similar positions carry no deltas and a folder's rows there
    // take the base's expert; elsewhere their own. Its logits are then those of the expanded
    // checkpoint with the base's experts put back at those positions. Under a budget it pins deltas
    // from the least similar position down, and the rest share the base: nothing misses.
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    const Checkpoint base(fixture("olmoe", "base"));
    for (const char* v : {"ft1", "ft2"}) write_delta(base, Checkpoint(fixture("olmoe", v)), {4, true, 32}, dir / (std::string("d") + v));
    write_expanded(dir / "dft1", dir / "x");
    Family family;
    open_family(family, {dir / "dft1", dir / "dft2"});
    const HostStore store(family);
    const auto analysis = analyze_family(family);
    const ModelSpec& s = store.spec();
    const ConsolidationPlan ranks = plan_consolidation(analysis->distances, 0, Policy::RoundRobin);
    auto rank = [&](std::int64_t l, std::int64_t e) { return ranks.rank[static_cast<std::size_t>(l * s.num_experts + e)]; };
    const std::int64_t shared = s.num_sparse_layers() * s.num_experts / 2;

    // The expected model: dft1 expanded, with the base's experts at the shared positions.
    fs::copy(dir / "x", dir / "mixed", fs::copy_options::recursive);
    {
      const Checkpoint x(dir / "x");
      rewrite_weights(dir / "mixed", [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& bytes) {
        const Weight& w = x.weight(t.name);
        if (!w.expected.is_expert() || rank(w.expected.layer, w.expected.expert) >= shared) return;
        QCOMPARE(t.dtype, DType::F32);
        const Weight& b = base.weight(t.name);
        std::vector<float> v(static_cast<std::size_t>(b.info->numel()));
        to_float(b.dtype, b.data().data(), v);
        std::memcpy(bytes.data(), v.data(), bytes.size());
      });
    }
    const auto mixed = Model::load(Checkpoint(dir / "mixed")), expanded = Model::load(Checkpoint(dir / "x"));
    const std::vector<std::int64_t> ids = prompt_of(10, 31, s.vocab_size);
    auto logits_of = [&](const Model& m) {
      KvCache cache(m.spec(), 1, static_cast<std::int64_t>(ids.size()));
      return forward(m, cache, ids, LogitsFor::AllPositions).values;
    };
    const Deployment by_capacity(StrategyConfig{.kind = StrategyKind::Hybrid, .capacity = shared}, family, store, *analysis, dir);
    QCOMPARE(by_capacity.targets(), (std::vector<std::string>{"dft1", "dft2"}));
    for (const PinnedExpert& p : by_capacity.partitions().front().runtime->config().pinned)
      if (store.is_delta(p.target)) QVERIFY(rank(p.layer, p.expert) >= shared);
    {
      Engine engine(by_capacity.partitions().front().runtime);
      const auto handle = engine.submit({"dft1", {.prompt = ids, .max_new_tokens = 0}, true});
      const RequestResult& r = handle->wait();
      const double err = relative_error(r.logits.values, logits_of(*mixed));
      QVERIFY2(err <= 1e-5, qPrintable(QString::number(err)));
      QCOMPARE(r.stats.counters.total().misses, std::int64_t(0));
      QVERIFY(relative_error(logits_of(*mixed), logits_of(*expanded)) > 1e-6);  // the sharing shows: the check above can fail
    }

    // Under a budget with room for about half of the deltas.
    const Deployment roomy(StrategyConfig{.kind = StrategyKind::Hybrid}, family, store, *analysis, dir);
    std::uint64_t total = 0, deltas = 0;
    for (const DeviceItem& item : roomy.partitions().front().runtime->device_items()) {
      if (!item.name.starts_with("spare slots")) total += item.bytes;
      if (item.name.starts_with("pinned while room")) deltas = item.bytes;
    }
    QVERIFY(deltas > 0);
    const Deployment tight(StrategyConfig{.kind = StrategyKind::Hybrid, .budget_bytes = total - deltas / 2}, family, store, *analysis, dir);
    const Runtime& rt = *tight.partitions().front().runtime;
    std::int64_t lowest_pinned = -1, highest_left = -1;
    std::set<std::tuple<std::int64_t, std::int64_t, int>> pinned;
    for (const PinnedExpert& p : rt.config().pinned)
      if (store.is_delta(p.target)) {
        pinned.emplace(p.layer, p.expert, p.target);
        lowest_pinned = lowest_pinned < 0 ? rank(p.layer, p.expert) : std::min(lowest_pinned, rank(p.layer, p.expert));
      }
    for (const PinnedExpert& p : deltas_layer_major(store, {store.index("dft1"), store.index("dft2")}))
      if (!pinned.count({p.layer, p.expert, p.target})) highest_left = std::max(highest_left, rank(p.layer, p.expert));
    QVERIFY(!pinned.empty() && highest_left >= 0);
    QVERIFY2(lowest_pinned >= highest_left, qPrintable(QStringLiteral("pinned from rank %1, left rank %2").arg(lowest_pinned).arg(highest_left)));
    Engine engine(tight.partitions().front().runtime);
    const auto handle = engine.submit({"dft2", {.prompt = ids, .max_new_tokens = 0}, true});
    QCOMPARE(handle->wait().stats.counters.total().misses, std::int64_t(0));

    // Folders over two bases have no one base's copy to share: refused, naming both.
    write_delta(Checkpoint(fixture("olmoe", "ft1")), Checkpoint(fixture("olmoe", "ft2")), {4, true, 32}, dir / "over_ft1");
    Family two;
    open_family(two, {dir / "dft1", dir / "over_ft1"});
    const HostStore two_store(two);
    const auto two_analysis = analyze_family(two);
    expect_mentions(error_of<InvalidArgument>([&] { Deployment(StrategyConfig{.kind = StrategyKind::Hybrid}, two, two_store, *two_analysis, dir); }),
                    {"two bases", "base", "ft1", "one base"});
  }

  void the_session_plans_hybrid_layouts_under_a_budget() {
    // The workbench's planner: hybrid puts the base's copy at every position and deltas from the
    // least similar position down, as many as the budget holds; its layout file round-trips and
    // serves the same pins; damaged hybrid layouts and families without delta folders are refused.
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    qputenv("MOSAIC_CACHE_DIR", QByteArray::fromStdString((dir / "cache").string()));
    const Checkpoint base(fixture("olmoe", "base"));
    for (const char* v : {"ft1", "ft2"}) write_delta(base, Checkpoint(fixture("olmoe", v)), {4, true, 32}, dir / (std::string("d") + v));
    auto opened = Session::open({dir / "dft1", dir / "dft2"});
    QVERIFY2(opened.ok(), opened.error_message().c_str());
    Session& s = **opened;
    QVERIFY(s.can_plan_hybrid());
    const HostStore& store = s.store();
    const std::size_t every_delta = deltas_layer_major(store, {store.index("dft1"), store.index("dft2")}).size();
    auto resident = [](const Layout& l) {
      std::int64_t n = 0;
      for (std::int64_t d : l.plan.deltas) n += d;
      return n;
    };
    s.plan(std::uint64_t(1) << 30, Policy::Hybrid);
    QCOMPARE(static_cast<std::size_t>(resident(s.layout())), every_delta);
    std::uint64_t all_bytes = 0, delta_bytes = 0;
    for (const DeviceItem& item : s.runtime().device_items()) {
      if (!item.name.starts_with("spare slots")) all_bytes += item.bytes;
      if (item.name.starts_with("pinned while room")) delta_bytes = item.bytes;
    }
    s.plan(all_bytes - delta_bytes / 2, Policy::Hybrid);
    const Layout planned = s.layout();
    const ConsolidationPlan& p = planned.plan;
    QVERIFY2(resident(planned) > 0 && static_cast<std::size_t>(resident(planned)) < every_delta, qPrintable(QString::number(resident(planned))));
    QCOMPARE(p.policy, Policy::Hybrid);
    std::int64_t lowest_with = std::numeric_limits<std::int64_t>::max(), highest_without = -1;
    for (std::size_t i = 0; i < p.map.size(); ++i) {
      if (p.rank[i] < 0) continue;
      QCOMPARE(planned.variants[static_cast<std::size_t>(p.map[i])].name, std::string("base"));
      const bool any_delta = store.source(store.index("dft1"), static_cast<std::int64_t>(i) / p.experts, static_cast<std::int64_t>(i) % p.experts).kind ==
                                 ExpertSource::Kind::Delta ||
                             store.source(store.index("dft2"), static_cast<std::int64_t>(i) / p.experts, static_cast<std::int64_t>(i) % p.experts).kind ==
                                 ExpertSource::Kind::Delta;
      if (p.deltas[i] > 0) lowest_with = std::min(lowest_with, p.rank[i]);
      else if (any_delta) highest_without = std::max(highest_without, p.rank[i]);
    }
    QVERIFY2(lowest_with > highest_without, qPrintable(QStringLiteral("deltas from rank %1, none at rank %2").arg(lowest_with).arg(highest_without)));
    const auto h = s.engine().submit({"dft1", {.prompt = prompt_of(6, 3, store.spec().vocab_size), .max_new_tokens = 2}});
    QCOMPARE(h->wait().stats.counters.total().misses, std::int64_t(0));  // rows without their delta take the base's copy

    // The layout file: saved, read back and applied, it pins what the plan pinned.
    auto pins = [](const Runtime& rt) {
      std::set<std::tuple<std::int64_t, std::int64_t, int>> out;
      for (const PinnedExpert& x : rt.config().pinned) out.emplace(x.layer, x.expert, x.target);
      return out;
    };
    const auto planned_pins = pins(s.runtime());
    save_layout(planned, dir / "hybrid.json");
    s.plan(std::uint64_t(1) << 30, Policy::Hybrid);
    s.apply(load_layout(dir / "hybrid.json"));
    QCOMPARE(pins(s.runtime()), planned_pins);
    QCOMPARE(s.layout().plan.deltas, p.deltas);
    // Damaged: deltas where a folder's copy, not the base's, is resident; no deltas grid; deltas past the folders.
    std::size_t at = 0;
    while (p.deltas[at] == 0) ++at;
    Layout moved = planned;
    moved.plan.map[at] = moved.variant_index("dft1");
    expect_mentions(error_of<MismatchError>([&] { s.apply(moved); }), {"map", "no copy of the delta folders' base", "every position"});
    std::size_t bare = 0;  // a position without deltas needs the base's copy as much
    while (p.rank[bare] < 0 || p.deltas[bare] > 0) ++bare;
    Layout unshared = planned;
    unshared.plan.map[bare] = -1;
    expect_mentions(error_of<MismatchError>([&] { s.apply(unshared); }), {"map", "no copy of the delta folders' base"});
    std::string text = read_text(dir / "hybrid.json");
    const std::string without = text.substr(0, text.find(",\n \"deltas\"")) + "\n}\n";
    expect_mentions(error_of<FormatError>([&] { parse_layout(without, "hybrid.json"); }), {"hybrid.json", "deltas", "is missing"});
    Layout greedy = planned;
    greedy.plan.deltas[at] = 3;  // two folders
    expect_mentions(error_of<MismatchError>([&] { s.apply(greedy); }), {"deltas", "asks for 3"});
    // Below the hybrid's floor (the base at every position), the error names that floor.
    expect_mentions(error_of<BudgetError>([&] { s.plan(all_bytes - delta_bytes - 1, Policy::Hybrid); }),
                    {"hybrid layout's minimum", "base's copy at all", "raise the budget"});
    QCOMPARE(pins(s.runtime()), planned_pins);  // every refusal left the session as it was

    // Without a budget: the floor and half of the deltas. A file without one serves like that too.
    s.plan(0, Policy::Hybrid);
    QVERIFY2(resident(s.layout()) > 0 && static_cast<std::size_t>(resident(s.layout())) < every_delta, qPrintable(QString::number(resident(s.layout()))));
    Layout unbudgeted = planned;
    unbudgeted.budget_bytes.reset();
    s.apply(unbudgeted);
    QCOMPARE(pins(s.runtime()), planned_pins);

    // The layout's variant order, not the order the folders were opened in, decides whose delta a
    // cell's count means.
    std::size_t split = 0;  // a position where both folders' deltas are resident; the layout keeps one
    while (p.deltas[split] < 2) ++split;
    Layout one = planned;
    one.plan.deltas[split] = 1;
    auto named = [](const Runtime& rt) {
      std::set<std::tuple<std::int64_t, std::int64_t, std::string>> out;
      for (const PinnedExpert& x : rt.config().pinned) out.emplace(x.layer, x.expert, rt.store().name(x.target));
      return out;
    };
    s.apply(one);
    auto reversed = Session::open({dir / "dft2", dir / "dft1"});
    QVERIFY2(reversed.ok(), reversed.error_message().c_str());
    QVERIFY((*reversed)->store().index("dft2") < (*reversed)->store().index("dft1"));
    (*reversed)->apply(one);
    QCOMPARE(named((*reversed)->runtime()), named(s.runtime()));
    const std::string first = one.variants[static_cast<std::size_t>(std::min(one.variant_index("dft1"), one.variant_index("dft2")))].name;
    QVERIFY(named(s.runtime()).count({static_cast<std::int64_t>(split) / p.experts, static_cast<std::int64_t>(split) % p.experts, first}));

    // The consolidated planner prices a miss slot as the runtime does (room for the largest pack):
    // at its minimum budget the runtime fits, with nothing to spare. (It priced the bare expert, and
    // its plans overran the budget by the packs.)
    const std::uint64_t floor = plan_capacity(s.family(), std::uint64_t(1) << 40).minimum_budget();
    s.plan(floor, Policy::RoundRobin);
    QCOMPARE(s.runtime().budget().used(), floor);
    expect_mentions(error_of<BudgetError>([&] { s.plan(floor - 1, Policy::RoundRobin); }), {"below the minimum"});
    // A pinned copy of a delta folder's expert holds the base's weights and its pack: every position
    // is priced so, and whatever the planner's capacity, the runtime's pins fit the budget.
    const std::uint64_t per_position = plan_capacity(s.family(), std::uint64_t(1) << 40).bytes_per_expert;
    for (const std::int64_t n : {1, 3, 6}) {
      const std::uint64_t budget = floor + static_cast<std::uint64_t>(n) * per_position;
      s.plan(budget, Policy::RoundRobin);  // the runtime throws BudgetError where its pins overrun
      QCOMPARE(s.layout().plan.capacity, n);
      QVERIFY(s.runtime().budget().used() <= budget);
    }

    // A family without delta folders cannot plan hybrid.
    auto plain = Session::open({fixture("olmoe", "base"), fixture("olmoe", "ft1")});
    QVERIFY(plain.ok());
    QVERIFY(!(*plain)->can_plan_hybrid());
    expect_mentions(error_of<InvalidArgument>([&] { (*plain)->plan(0, Policy::Hybrid); }), {"delta folder", "delta compress"});
    expect_mentions(error_of<InvalidArgument>([&] { plan_consolidation(s.analysis().distances, 4, Policy::Hybrid); }), {"hybrid", "budget"});
  }

  void every_format_serves_as_its_expansion() {
    // The other formats through the runtime (the test above serves 4-bit 2:4): 2-bit dense with a
    // group ending mid-row, 2-bit 2:4, 4-bit dense; in delta-only slots and loaded on miss.
    const Checkpoint base(fixture("olmoe", "base"));
    for (const DeltaFormat& f : {DeltaFormat{2, false, 32}, DeltaFormat{2, true, 128}, DeltaFormat{4, false, 48}}) {
      QTemporaryDir tmp;
      const fs::path dir = tmp.path().toStdString();
      write_delta(base, Checkpoint(fixture("olmoe", "ft2")), f, dir / "d");
      write_expanded(dir / "d", dir / "x");
      const auto expanded = Model::load(Checkpoint(dir / "x"));
      Family family;
      open_family(family, {dir / "d"});
      const HostStore store(family);
      const int d = store.index("d"), b = store.index("base");
      std::vector<PinnedExpert> weave = every_position(store.spec(), b);
      for (const PinnedExpert& p : deltas_layer_major(store, {d})) weave.push_back(p);
      const std::vector<std::int64_t> ids = prompt_of(8, 21, store.spec().vocab_size);
      KvCache cache(expanded->spec(), 1, static_cast<std::int64_t>(ids.size()));
      const std::vector<float> want = forward(*expanded, cache, ids, LogitsFor::AllPositions).values;
      for (const bool resident : {true, false}) {
        auto rt = std::make_shared<Runtime>(store, RuntimeConfig{.pinned = resident ? weave : std::vector<PinnedExpert>{}, .hit = HitPolicy::Strict, .miss = "transient"});
        Engine engine(rt);
        const auto handle = engine.submit({"d", {.prompt = ids, .max_new_tokens = 0}, true});
        const RequestResult& r = handle->wait();
        const double err = relative_error(r.logits.values, want);
        QVERIFY2(err <= 1e-5, qPrintable(QStringLiteral("%1-bit, 2:4 %2, group %3, %4: %5").arg(f.bits).arg(f.sparse24).arg(f.group).arg(resident ? QStringLiteral("resident") : QStringLiteral("on miss")).arg(err)));
        QCOMPARE(r.stats.counters.total().misses == 0, resident);
      }
    }
  }

  void pins_taken_while_room_are_charged_as_they_are_held() {
    // A delta pinned after its base holds only its pack; one pinned before it holds base and pack
    // in one slot, and is charged both. Under any budget, what is reserved fits in it.
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    write_delta(Checkpoint(fixture("olmoe", "base")), Checkpoint(fixture("olmoe", "ft1")), {4, true, 32}, dir / "d");
    Family family;
    open_family(family, {dir / "d"});
    const HostStore store(family);
    const int d = store.index("d"), b = store.index("base");
    const ModelSpec& s = store.spec();
    PinnedExpert at{-1, -1, d};
    for (std::int64_t l = 0; l < s.num_layers && at.layer < 0; ++l)
      for (std::int64_t e = 0; e < s.num_experts && s.is_sparse(l) && at.layer < 0; ++e)
        if (store.source(d, l, e).kind == ExpertSource::Kind::Delta) at = {l, e, d};
    QVERIFY(at.layer >= 0);
    const PinnedExpert base_at{at.layer, at.expert, b};
    const std::uint64_t eb = store.expert_bytes(), packed = store.delta(store.expert_tensors(store.expert(d, at.layer, at.expert)).delta).bytes();
    QVERIFY(packed > 0 && packed < eb);
    auto items = [&](std::vector<PinnedExpert> optional, std::optional<std::uint64_t> budget) {
      return Runtime(store, RuntimeConfig{.pinned_if_room = std::move(optional), .miss = "lru", .budget_bytes = budget}).device_items();
    };
    auto room = [](const std::vector<DeviceItem>& all) {
      for (const DeviceItem& item : all)
        if (item.name.starts_with("pinned while room")) return item;
      return DeviceItem{};
    };
    QCOMPARE(room(items({base_at, at}, std::nullopt)).bytes, eb + packed);
    QCOMPARE(room(items({at, base_at}, std::nullopt)).bytes, (eb + packed) + eb);
    // Every delta over every base, under budgets from roomy to barely above the reserve.
    std::vector<PinnedExpert> optional = every_position(s, b);
    const std::vector<PinnedExpert> deltas = deltas_layer_major(store, {d});
    QVERIFY(!deltas.empty());
    optional.insert(optional.end(), deltas.begin(), deltas.end());
    std::uint64_t without_spares = 0;
    for (const DeviceItem& item : items(optional, std::nullopt))
      if (!item.name.starts_with("spare slots")) without_spares += item.bytes;
    const std::uint64_t wanted = room(items(optional, std::nullopt)).bytes;
    for (const double share : {1.0, 0.7, 0.3, 0.05}) {
      const std::uint64_t budget = without_spares - wanted + static_cast<std::uint64_t>(share * static_cast<double>(wanted));
      std::uint64_t reserved = 0;
      const auto all = items(optional, budget);
      for (const DeviceItem& item : all) reserved += item.bytes;
      QVERIFY2(reserved <= budget, qPrintable(QStringLiteral("%1 of %2 bytes at share %3").arg(reserved).arg(budget).arg(share)));
      QVERIFY(room(all).bytes <= static_cast<std::uint64_t>(share * static_cast<double>(wanted)) + 1);
    }
    // Time-sharing reloads pinned slots per swap: it cannot also pin while room.
    expect_mentions(error_of<InvalidArgument>([&] {
                      Runtime(store, RuntimeConfig{.pinned = every_position(s, b), .pinned_if_room = {at}, .whole_model_swaps = true});
                    }),
                    {"time-sharing", "pin"});
  }

  void wrong_bases_and_damaged_folders_are_refused() {
    QTemporaryDir tmp;
    const fs::path dir = tmp.path().toStdString();
    fs::copy(fixture("olmoe", "base"), dir / "base", fs::copy_options::recursive);
    const DeltaFormat f{4, true, 128};
    write_delta(Checkpoint(dir / "base"), Checkpoint(fixture("olmoe", "ft1")), f, dir / "d");
    QVERIFY(!fs::exists(dir / "d" / "expert_cfg.json"));
    // A variant of another architecture.
    expect_mentions(error_of<Error>([&] { write_delta(Checkpoint(dir / "base"), Checkpoint(fixture("mixtral", "ft1")), f, dir / "e"); }), {"model_type", "mixtral", "olmoe"});
    QVERIFY(!fs::exists(dir / "e"));
    // delta.json saying another group than the arrays were packed with.
    const std::string cfg = (dir / "d" / kDeltaCfgFile).string();
    std::string text;
    std::getline(std::ifstream(cfg), text, '\0');
    fs::copy(dir / "d", dir / "regrouped", fs::copy_options::recursive);
    std::ofstream(dir / "regrouped" / kDeltaCfgFile) << std::string(text).replace(text.find("\"group\": 128"), std::string("\"group\": 128").size(), "\"group\": 4");
    expect_mentions(error_of<FormatError>([&] { write_expanded(dir / "regrouped", dir / "x1"); }), {".scales", "compress the delta again"});
    QVERIFY(!fs::exists(dir / "x1"));
    // A truncated pack file.
    fs::copy(dir / "d", dir / "cut", fs::copy_options::recursive);
    fs::resize_file(dir / "cut" / "model.safetensors", fs::file_size(dir / "cut" / "model.safetensors") / 2);
    expect_mentions(error_of<FormatError>([&] { write_expanded(dir / "cut", dir / "x2"); }), {"model.safetensors"});
    // base_model naming what cannot be a base: refused naming delta.json's field, before anything
    // is opened (two folders naming each other must not recurse).
    auto with_base = [&](const std::string& folder, const fs::path& base_model) {
      fs::copy(dir / "d", dir / folder, fs::copy_options::recursive);
      DeltaConfig c = read_delta_config(dir / folder / kDeltaCfgFile);
      c.base_model = base_model;
      std::ofstream(dir / folder / kDeltaCfgFile, std::ios::trunc) << to_delta_json(c);
    };
    with_base("self", ".");
    expect_mentions(error_of<UnsupportedError>([&] { Checkpoint(dir / "self"); }), {"delta.json", "base_model", "this folder itself"});
    with_base("gone", "../nowhere");
    expect_mentions(error_of<MissingError>([&] { Checkpoint(dir / "gone"); }), {"delta.json", "base_model", "nowhere", "not a folder"});
    with_base("m1", "../m2");
    with_base("m2", "../m1");
    expect_mentions(error_of<UnsupportedError>([&] { Checkpoint(dir / "m1"); }), {"delta.json", "base_model", "m2", "full checkpoint"});
    fs::copy(dir / "base", dir / "adapter-like", fs::copy_options::recursive);
    std::ofstream(dir / "adapter-like" / "expert_cfg.json") << "{}";
    with_base("on-adapter", "../adapter-like");
    expect_mentions(error_of<UnsupportedError>([&] { Checkpoint(dir / "on-adapter"); }), {"base_model", "expert_cfg.json", "full checkpoint"});
    // A dense expert weight beside the packs: refused naming it.
    fs::copy(dir / "d", dir / "dense", fs::copy_options::recursive);
    std::string dense_name;
    {
      const Checkpoint b(dir / "base");
      const SafetensorsFile packs(dir / "d" / "model.safetensors");
      std::vector<TensorBytes> out;
      for (const TensorInfo& t : packs.tensors()) out.push_back({t.name, t.dtype, t.shape, packs.data(t)});
      for (const Weight& w : b.weights())
        if (w.expected.is_expert() && dense_name.empty()) {
          dense_name = w.expected.name;
          out.push_back({w.expected.name, w.dtype, w.info->shape, w.data()});
        }
      write_safetensors(dir / "dense" / "model.safetensors", out, {{"format", "pt"}});
    }
    expect_mentions(error_of<FormatError>([&] { Checkpoint(dir / "dense"); }), {dense_name, "dense expert weight", "delta compress"});
    // A pack whose contents break the format (zero points past 4 bits) is refused when read, naming it.
    fs::copy(dir / "d", dir / "bad-zeros", fs::copy_options::recursive);
    std::string zeros_name;
    rewrite_weights(dir / "bad-zeros", [](const TensorInfo&) { return true; }, [&](const TensorInfo& t, std::vector<std::byte>& bytes) {
      if (!t.name.ends_with(".zeros") || !zeros_name.empty()) return;
      zeros_name = t.name;
      std::fill(bytes.begin(), bytes.end(), std::byte{0xff});
    });
    QVERIFY(!zeros_name.empty());
    expect_mentions(error_of<FormatError>([&] { write_expanded(dir / "bad-zeros", dir / "x4"); }), {"zeros", "compress the delta again"});
    QVERIFY(!fs::exists(dir / "x4"));
    // The base changed since the delta was taken.
    {
      std::ofstream(dir / "base" / "config.json", std::ios::app) << "\n";
    }
    expect_mentions(error_of<MismatchError>([&] { write_expanded(dir / "d", dir / "x3"); }), {"base_sha256", "another base"});
    QVERIFY(!fs::exists(dir / "x3"));
    // A NaN in the variant's experts has no code: refused naming the tensor.
    fs::copy(fixture("olmoe", "ft1"), dir / "nan", fs::copy_options::recursive);
    {
      const Checkpoint ck(dir / "nan");
      const Weight* expert = nullptr;
      for (const Weight& w : ck.weights())
        if (w.expected.is_expert() && !expert) expert = &w;
      std::uint64_t header = 0;
      std::ifstream(dir / "nan" / "model.safetensors", std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
      const std::uint64_t at = 8 + header + expert->info->begin;
      const std::string name = expert->expected.name;
      const std::size_t width = dtype_size(expert->dtype);
      std::fstream file(dir / "nan" / "model.safetensors", std::ios::binary | std::ios::in | std::ios::out);
      file.seekp(static_cast<std::streamoff>(at));
      file.write(std::string(width, '\xff').data(), static_cast<std::streamsize>(width));  // all ones: NaN in every float format
      file.close();
      expect_mentions(error_of<FormatError>([&] { write_delta(Checkpoint(dir / "base"), Checkpoint(dir / "nan"), f, dir / "n"); }), {name});
      QVERIFY(!fs::exists(dir / "n"));
    }
    // delta.json itself.
    expect_mentions(error_of<FormatError>([] { parse_delta_config(R"({"schema": "mosaic.delta/1", "base_model": "../b", "base_sha256": ")" + std::string(64, 'a') + R"(", "bits": 3, "sparsity": "2:4", "group": 128})", "delta.json"); }), {"bits", "4 or 2"});
    expect_mentions(error_of<MissingError>([] { parse_delta_config(R"({"schema": "mosaic.delta/1"})", "delta.json"); }), {"base_model"});
    expect_mentions(error_of<FormatError>([] { parse_delta_config(R"({"schema": "mosaic.delta/1", "base_model": "../b", "base_sha256": "x", "bitz": 4})", "delta.json"); }), {"bitz"});
  }

  void the_cpu_kernel_multiplies_by_the_packed_delta_as_expanded() {
    // delta_linear_cpu reads the packed arrays; its product equals x · Δ̂ᵀ with Δ̂ expanded, for every
    // format, one token and a batch, and it adds to y when asked (the base's product is there).
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Both kernels: the scalar reference, and AVX2 where this CPU has it (groups ending mid-vector
    // with 200 columns; a group of 36 falls back to the reference).
    using Kernel = std::function<bool(const float*, int, const kernels::DeltaView&, bool, float*)>;
    const std::vector<std::pair<const char*, Kernel>> kernels_under_test{
        {"reference", [](const float* x, int n, const kernels::DeltaView& v, bool a, float* y) { kernels::delta_linear_reference(x, n, v, a, y); return true; }},
        {"avx2", [](const float* x, int n, const kernels::DeltaView& v, bool a, float* y) { return kernels::delta_linear_avx2(x, n, v, a, y); }}};
    int avx2_ran = 0;
    std::vector<DeltaFormat> formats(std::begin(kFormats), std::end(kFormats));
    formats.push_back({4, false, 36});
    for (const auto& [kernel_name, kernel] : kernels_under_test)
    for (const std::int64_t cols : {192, 200})
    for (const DeltaFormat& f : formats) {
      const std::int64_t rows = 24;
      const PackedDelta p = compress_delta(delta_like(rows, cols, 6), rows, cols, f);
      std::vector<float> dense(static_cast<std::size_t>(rows * cols));
      expand_delta(p, f, dense);
      const kernels::DeltaView view = delta_view(p, f);
      for (int n : {1, 5}) {
        std::vector<float> x(static_cast<std::size_t>(n * cols)), y(static_cast<std::size_t>(n * rows), 1.0f);
        for (float& v : x) v = normal(rng);
        if (!kernel(x.data(), n, view, /*accumulate=*/true, y.data())) {
          QVERIFY(std::string(kernel_name) == "avx2");
          continue;
        }
        avx2_ran += std::string(kernel_name) == "avx2";
        for (int t = 0; t < n; ++t)
          for (std::int64_t r = 0; r < rows; ++r) {
            double want = 1.0, scale = 0;
            for (std::int64_t c = 0; c < cols; ++c) {
              want += static_cast<double>(dense[static_cast<std::size_t>(r * cols + c)]) * x[static_cast<std::size_t>(t * cols + c)];
              scale += std::abs(static_cast<double>(dense[static_cast<std::size_t>(r * cols + c)]) * x[static_cast<std::size_t>(t * cols + c)]);
            }
            const double got = y[static_cast<std::size_t>(t * rows + r)];
            QVERIFY2(std::abs(got - want) <= 1e-5 * (1.0 + scale), qPrintable(QStringLiteral("%1, %2 bits, group %3, %4 columns, row %5: %6 against %7").arg(QString::fromLatin1(kernel_name)).arg(f.bits).arg(f.group).arg(cols).arg(r).arg(got).arg(want)));
          }
        // Blocks of rows, each as a view of its own, into a wider output (a column block of y, as
        // the runtime writes gate and up side by side) give the same product, to the bit.
        // Each kernel is compared with itself: blocking must not change a row's sum.
        const std::int64_t ld = rows + 7;
        std::vector<float> wide(static_cast<std::size_t>(n * ld), 1.0f);
        for (std::int64_t r0 = 0; r0 < rows; r0 += 5) {
          const kernels::DeltaView block = kernels::delta_rows(view, r0, std::min(rows, r0 + 5));
          float* out = wide.data() + 3 + r0;
          if (std::string(kernel_name) == "reference") kernels::delta_linear_reference(x.data(), n, block, true, out, ld);
          else QVERIFY(kernels::delta_linear_avx2(x.data(), n, block, true, out, ld));
        }
        for (int t = 0; t < n; ++t) {
          QCOMPARE(wide[static_cast<std::size_t>(t * ld)], 1.0f);  // left of the block: untouched
          QCOMPARE(wide[static_cast<std::size_t>(t * ld + 3 + rows)], 1.0f);  // right of it too
          for (std::int64_t r = 0; r < rows; ++r)
            QCOMPARE(wide[static_cast<std::size_t>(t * ld + 3 + r)], y[static_cast<std::size_t>(t * rows + r)]);
        }
      }
    }
#if defined(__x86_64__)
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const bool avx2 = false;
#endif
    if (!avx2) qWarning("no AVX2 and FMA on this CPU: only the reference kernel was tested");
    else QVERIFY(avx2_ran > 0);
    // Its f16 reading is the model layer's, for every one of the 65536 patterns.
    for (std::uint32_t h = 0; h < 65536; ++h) {
      const float a = kernels::f16_to_float(static_cast<std::uint16_t>(h)), b = f16(static_cast<std::uint16_t>(h));
      QVERIFY2((std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0, qPrintable(QString::number(h, 16)));
    }
  }

  void damaged_packs_are_refused_naming_the_array() {
    const DeltaFormat f{4, true, 32};
    const PackedDelta good = compress_delta(delta_like(4, 64, 4), 4, 64, f);
    auto refused = [&](auto damage, std::initializer_list<std::string_view> words) {
      PackedDelta p = good;
      damage(p);
      expect_mentions(error_of<FormatError>([&] { check_packed(p, f, "model.safetensors: layers.0.mlp.experts.1.up_proj"); }), words);
    };
    refused([](PackedDelta& p) { p.qweight.pop_back(); }, {"up_proj", "qweight", "compress the delta again"});
    refused([](PackedDelta& p) { p.meta.push_back(0); }, {"meta"});
    refused([](PackedDelta& p) { p.scales.resize(3); }, {"scales"});
    refused([](PackedDelta& p) { p.zeros[2] = 16; }, {"zeros", "16", "4-bit"});
    refused([](PackedDelta& p) { p.scales[1] = 0; }, {"scales", "entry 1", "compress the delta again"});
    refused([](PackedDelta& p) { p.scales[0] = 0x7e00; }, {"scales", "entry 0"});  // NaN
    refused([](PackedDelta& p) { p.meta[0] = (p.meta[0] & ~0xFu) | 0x5u; }, {"meta", "row 0", "places 1 and 1", "compress the delta again"});
    // Formats the codec cannot hold.
    expect_mentions(error_of<InvalidArgument>([] { check_format({3, true, 128}, 4, 64, "delta"); }), {"bits", "4 or 2"});
    expect_mentions(error_of<InvalidArgument>([] { check_format({4, true, 6}, 4, 64, "delta"); }), {"group", "multiple of 4"});
    expect_mentions(error_of<InvalidArgument>([] { check_format({4, true, 128}, 4, 66, "delta"); }), {"66", "sparsity none"});
    expect_mentions(error_of<InvalidArgument>([] { compress_delta(std::vector<float>{1e9f, 0, 0, 0}, 1, 4, {4, true, 4}); }), {"f16"});
  }
};

QTEST_APPLESS_MAIN(DeltaTest)
#include "tst_delta.moc"
