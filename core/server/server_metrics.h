#pragma once
// What `GET /metrics` reports, in Prometheus' text format: requests by model and status, TTFT and
// TPOT histograms, sequences running and waiting, KV blocks in use, per-layer hits and misses,
// swaps and expert loads (from RAM or from disk), the host tier's residency. Updated from the engine's callbacks and the HTTP threads; thread-safe.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/host_tier.h"
#include "runtime/request_stats.h"
#include "server/http_transport.h"

namespace mosaic::server {

// A model added or removed while serving, and what it cost: served in place (only the experts whose
// owner changed are copied) or by a rebuilt runtime (every device byte filled again).
struct ModelChange {
  std::string change;  // "add" or "remove"; "replace" where the workbench reopened the family with both
  double seconds = 0;  // from the request to the family served
  bool in_place = false;
  std::int64_t copies = 0;  // experts copied (in place)
  std::uint64_t bytes = 0;  // device bytes copied
};

class ServerMetrics {
 public:
  // A request that ended: its model, its status ("ok", "cancelled", "failed") and what it cost.
  void finished(const std::string& model, const std::string& status, const RequestStats& stats);
  // A request answered with an error before it reached the engine ("invalid", "refused", …).
  void rejected(const std::string& model, const std::string& status);
  void set_sequences(std::int64_t running, std::int64_t waiting);
  void set_kv_blocks(std::int64_t used);
  void set_host_tier(const TierStats& stats, std::optional<std::uint64_t> budget);
  void set_connections(const TransportCounts& c);
  // A model added or removed while serving.
  void model_changed(const ModelChange& change);

  std::string text() const;  // the exposition
  // Requests counted by status, summed over models (for tests and the closing summary).
  std::int64_t requests(const std::string& status) const;
  // What the engine finished, as every front end says it: "5 completed, 1 cancelled" (parts that
  // are zero left out, but for "completed").
  std::string finished_summary() const;

 private:
  struct Histogram {
    std::vector<std::int64_t> counts;  // per bucket, cumulative when printed
    double sum = 0;
    std::int64_t count = 0;
    void add(double v);
  };
  mutable std::mutex m_;
  std::map<std::pair<std::string, std::string>, std::int64_t> requests_;  // (model, status)
  Histogram ttft_, tpot_;
  std::int64_t running_ = 0, waiting_ = 0, kv_used_ = 0;
  TransportCounts connections_;
  std::optional<TierStats> host_;
  std::optional<std::uint64_t> host_budget_;
  std::int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  std::vector<LayerCounts> layers_;
  std::int64_t swaps_ = 0;
  std::uint64_t swap_bytes_ = 0;
  double swap_seconds_ = 0;
  std::map<std::string, std::int64_t> changes_;  // by "add" / "remove"
  double change_seconds_ = 0;
  std::int64_t changes_in_place_ = 0, change_copies_ = 0;
  std::uint64_t change_bytes_ = 0;
};

}  // namespace mosaic::server
