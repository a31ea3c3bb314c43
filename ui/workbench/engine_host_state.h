#pragma once
// What the engine host keeps on its thread: the session, the chat's request, the sweep's thread, and
// the reference models a comparison loads. Shared by engine_host.cpp and engine_host_compare.cpp.
#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/model.h"
#include "server/http_server.h"
#include "serving/session.h"
#include "store/recorder.h"
#include "workbench/engine_host.h"

namespace mosaic::ui {

// What the serving charts take of a finished request; the caller adds where it belongs (strategy,
// run, rate, time, progress).
ServedPoint served_point(const RequestRecord& r);

struct EngineHost::State {
  std::unique_ptr<Session> session;
  Device device = Device::Cpu;  // what every session opened serves on
  CpuWeights cpu_weights = CpuWeights::Stored;  // and how it holds weights on the CPU
  std::optional<std::uint64_t> host_budget;  // the host tier's budget of every session opened; nullopt: all
  std::mutex request_mutex;  // guards `request`, which stopChat() reaches from the GUI thread
  std::shared_ptr<RequestHandle> request;
  // A sweep runs on a thread of its own so that this thread stays free: the chat's requests join the
  // sweep's batches on the session's engine. The session outlives it (joined before a reset).
  std::thread sweep;
  std::atomic<bool> sweeping{false};
  void join_sweep() {
    if (sweep.joinable()) sweep.join();
  }
  // Checkpoints loaded alone for a comparison's "own weights" side, by variant name (this family's).
  std::map<std::string, std::unique_ptr<Model>> own_models;
  // The chat's view of each target (tokenizer, chat template), read once, by name (this family's);
  // shared with the streams decoding with it, which may outlive a change of family.
  std::map<std::string, std::shared_ptr<const server::ServedModel>> chat_models;
  std::atomic<bool> stop_compare{false};  // the reference side checks it at every token
  std::vector<std::shared_ptr<RequestHandle>> compare_requests;  // the served sides'; guarded by request_mutex
  // The HTTP server on the session's engine, listening on a thread of its own; stopped (and its
  // run finished) before the session changes.
  std::unique_ptr<Recorder> http_recorder;
  std::int64_t http_run = 0;
  QString http_database;
  bool http_plain_chat = false;
  // A start asked for before the open family's first layout was planned (the plan is queued behind
  // the open): made once a plan succeeds, dropped by Stop.
  std::optional<HttpSettings> pending_http;
  std::unique_ptr<server::HttpServer> http;
  std::thread http_thread;
  bool serving_http() const { return http != nullptr; }
  // Whether a chat's or a comparison's request is still running on the session's engine.
  bool requests_running() {
    std::lock_guard lock(request_mutex);
    if (request && !request->finished()) return true;
    return std::any_of(compare_requests.begin(), compare_requests.end(), [](const auto& r) { return r && !r->finished(); });
  }
  // Stops the server (running requests get `grace_seconds`), joins it and finishes its run;
  // returns what it served, in a sentence. Defined in engine_host_http.cpp.
  QString stop_http(double grace_seconds);
  // After a re-plan of the session while the server serves: the engine takes the new runtime at its
  // next step (running requests recomputed under it), and the server reads its metrics from it.
  void follow_runtime();
};

}  // namespace mosaic::ui
