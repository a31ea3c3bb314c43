// The router kernel's CPU reference: the baseline the CUDA kernel is checked against on a GPU.
#include <QTest>

#include <cmath>
#include <random>
#include <set>

#include "kernels/router_topk.h"

using mosaic::kernels::router_topk_reference;

class TestRouterTopk : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void knownProbabilities() {
    const float logits[] = {std::log(1.f), std::log(2.f), std::log(3.f), std::log(4.f)};  // p = .1 .2 .3 .4
    std::int32_t ids[2];
    float w[2];
    router_topk_reference(logits, 1, 4, 2, false, ids, w);
    QCOMPARE(ids[0], 3);
    QCOMPARE(ids[1], 2);
    QVERIFY(std::abs(w[0] - 0.4f) < 1e-6f && std::abs(w[1] - 0.3f) < 1e-6f);
    router_topk_reference(logits, 1, 4, 2, true, ids, w);
    QVERIFY(std::abs(w[0] - 4.f / 7) < 1e-6f && std::abs(w[1] - 3.f / 7) < 1e-6f);
  }

  void tiesGoToTheLowerExpert() {
    const float logits[] = {1.f, 5.f, 5.f, 5.f, 0.f};
    std::int32_t ids[2];
    float w[2];
    router_topk_reference(logits, 1, 5, 2, false, ids, w);
    QCOMPARE(ids[0], 1);
    QCOMPARE(ids[1], 2);
  }

  void randomRowsAreWellFormed() {
    std::mt19937 rng(5);
    std::normal_distribution<float> n(0.f, 3.f);
    const int tokens = 37, experts = 64, k = 6;
    std::vector<float> logits(tokens * experts);
    for (float& x : logits) x = n(rng);
    std::vector<std::int32_t> ids(tokens * k);
    std::vector<float> w(tokens * k);
    router_topk_reference(logits.data(), tokens, experts, k, true, ids.data(), w.data());
    for (int t = 0; t < tokens; ++t) {
      std::set<int> distinct(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      QCOMPARE(int(distinct.size()), k);
      float sum = 0;
      for (int j = 0; j < k; ++j) {
        sum += w[t * k + j];
        if (j) QVERIFY(w[t * k + j] <= w[t * k + j - 1]);
      }
      QVERIFY(std::abs(sum - 1.f) < 1e-5f);
      // The last chosen expert's logit is no smaller than any expert left out.
      const float* row = logits.data() + t * experts;
      for (int e = 0; e < experts; ++e)
        if (!distinct.count(e)) QVERIFY(row[e] <= row[ids[t * k + k - 1]]);
    }
  }
};

QTEST_GUILESS_MAIN(TestRouterTopk)
#include "tst_router_topk.moc"
