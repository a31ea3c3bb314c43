#pragma once
// SwapMoE's virtual experts: per MoE layer a fixed number of resident experts (the runtime's pinned
// slots, as the plan sized them) that changes with the traffic. Importance (expert_importance.h) is
// accumulated from every step; every `update_every` steps, or sooner when a layer's importance
// outside its set passes `shift`, the most important experts not resident are copied into staging
// slots — on a copy thread while steps go on — and swapped in at the next step boundary after the
// copies finish, each replacing the least important resident one. The router is masked to what is
// resident (the masked miss policy), so a step never waits for an update and an update never
// changes a step already running: tables change only between steps. On a simulated device the
// importance comes from the drawn routes (every expert's norm alike) and the copies ride its link
// behind the steps (Backend::copy_behind), priced on its clock.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/backend.h"
#include "runtime/expert_importance.h"
#include "runtime/policies.h"

namespace mosaic {

struct VirtualConfig {
  std::int64_t update_every = 8;  // steps between updates
  double shift = 0.25;            // or sooner: once this share of a layer's importance is outside its set
  double decay = 0.9;             // each step's factor on the importance accumulated before it
  std::int64_t staging = 1;       // staging slots per layer: the most experts one update swaps in there
  bool asynchronous = true;       // copies on a copy thread; false: on the engine's thread, at once
};

// Throws InvalidArgument naming the setting that is out of range for `spec` (staging at most the
// layer's experts, an interval of at least 1 step, decay and shift in (0, 1]).
void check_virtual_config(const VirtualConfig& config, const ModelSpec& spec);

struct VirtualStats {
  std::int64_t updates = 0;           // committed
  std::int64_t swapped = 0;           // experts swapped in
  std::uint64_t bytes = 0;            // host bytes they copied
  double copy_seconds = 0;            // wall time of those copies, on the copy path (a simulated
                                      // device: its seconds until they had landed; CUDA's copy
                                      // engine: until a step boundary found them landed)
  std::int64_t steps_overlapped = 0;  // steps that began while an update's copies were in flight
};

class VirtualExperts {
 public:
  // `pools` and `tables` per layer (null in dense layers): the pinned slots hold the initial set,
  // the spare slots are the staging slots.
  VirtualExperts(const VirtualConfig& config, const HostStore& store, HitPolicy hit, Backend& backend,
                 std::vector<SlotPool*> pools, std::vector<RerouteTable*> tables);
  ~VirtualExperts();
  VirtualExperts(const VirtualExperts&) = delete;
  VirtualExperts& operator=(const VirtualExperts&) = delete;

  const VirtualConfig& config() const { return config_; }
  ExpertImportance& importance() { return importance_; }
  const ExpertImportance& importance() const { return importance_; }
  const VirtualStats& stats() const { return stats_; }

  // At a step boundary, before the step: swaps in an update whose copies have finished.
  void before_step();
  // After the step: decays the importance, and starts an update when one is due and none is in flight.
  void after_step();
  // Waits for the copies in flight, if any, and swaps them in (tests, benchmarks, shutdown).
  void settle();
  // [layers][experts]: whether `row`'s router may choose the expert now (dense layers: every one).
  std::vector<std::vector<bool>> allowed(int row) const;

 private:
  struct Swap {
    std::int64_t layer = 0;
    std::int32_t out = -1, in = -1;  // the resident slot replaced, the staging slot copied into
    ExpertSource source;
    ExpertId content = -1;
  };
  bool due() const;
  std::vector<Swap> choose();
  void copy(const std::vector<Swap>& swaps);  // on the copy path
  void commit();
  void point_rows(std::int64_t layer, std::int64_t expert);

  VirtualConfig config_;
  const HostStore& store_;
  HitPolicy hit_;
  Backend& backend_;
  std::vector<SlotPool*> pools_;
  std::vector<RerouteTable*> tables_;
  ExpertImportance importance_;
  // A priced device (Backend::device_seconds) carries the copies on its own link behind the steps
  // (copy_behind), so no copy thread runs; its clock when the copies in flight began.
  bool priced_;
  double copies_began_ = 0;
  std::vector<std::vector<std::int32_t>> staging_;  // [layers]: slots holding nothing the tables name
  std::int64_t since_update_ = 0;
  VirtualStats stats_;

  std::vector<Swap> pending_;
  std::thread copier_;
  std::atomic<bool> copied_{false};
  std::uint64_t pending_bytes_ = 0;  // written by the copier before copied_, read after
  double pending_seconds_ = 0;
  std::chrono::steady_clock::time_point copies_queued_at_;  // a backend that queues copies: when they were
  std::exception_ptr copy_error_;
};

}  // namespace mosaic
