#pragma once
// An OpenAI-compatible HTTP server over one Engine: GET /v1/models, POST /v1/completions and
// /v1/chat/completions (streamed as server-sent events or whole), GET /metrics (Prometheus), GET
// /health, GET /v1/models/NAME. The variant is chosen per request by `model`. Every request that
// reaches the engine is recorded to SQLite when a Recorder is given, as one run of strategy "serve",
// and shown to an observer when one is given (both on the request log's thread, never the engine's).
// With a ModelChanges owner, POST /v1/models and DELETE /v1/models/NAME change the family served.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "runtime/engine.h"
#include "server/request_log.h"
#include "server/server_metrics.h"

namespace mosaic {
class Recorder;
}


namespace mosaic::server {


struct ServedModel {
  std::string id;    // what `model` names: a variant's or an adapter's folder name
  std::string base;  // an adapter's or delta folder's base ("" for a full variant)
  Tokenizer tokenizer;
  // Chat requests are rendered with it where the folder has one (tokenizer_config.json), else as
  // plain "role: content" lines.
  std::optional<ChatTemplate> chat_template;
  std::vector<std::int64_t> eos_ids;
  std::int64_t context = 0;  // max_position_embeddings
  std::int64_t created = 0;  // Unix seconds its config.json (or folder) was written: OpenAI's `created`
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (bind() says which)
  std::string api_key;                 // empty: no key asked for
  std::size_t max_requests = 256;      // admitted at once (running and waiting); past it 429
  std::size_t max_body_bytes = 1 << 20;
  int threads = 0;                     // HTTP worker threads (0: max_requests + 8, so streams never starve)
  double read_timeout_seconds = 10;    // a request's head and body must arrive within this (408 past it)
  std::size_t max_connections = 512;   // open at once, in total
  std::size_t max_per_client = 256;     // from one address (at either cap the slowest reader gives way)
  std::size_t stream_interval = 1;     // tokens per streamed event after the first (vLLM's --stream-interval)
};

// Where finished requests go, on the request log's thread (never the engine's): written to
// `recorder` as one run of strategy "serve" (begun by bind() with `config_json`, finished by stop()),
// then shown to `observer`, in the order they finished (RequestRecord::index numbers them from 0).
struct ServerRecording {
  Recorder* recorder = nullptr;  // null: nothing written
  std::string config_json = "{}";
  RequestLog::Observer observer;
};

// Model management (serve --allow-model-changes). The server takes POST /v1/models {"id", "path"}
// and DELETE /v1/models/NAME, checks what it can at once, and hands the work to its owner, which runs
// it off the HTTP threads and reports back through set_models() and set_model_state().
class ModelChanges {
 public:
  virtual ~ModelChanges() = default;
  // Throws mosaic::Error for a folder that cannot join the family (answered 400, naming why); else
  // the change is queued (the owner sets its state) and the answer is 202.
  virtual void add(const std::string& id, const std::filesystem::path& dir) = 0;
  // The server has stopped admitting `id` already; the owner withdraws it (HttpServer::withdraw) and
  // serves the family without it. Throws mosaic::Error when it cannot be removed (the last model).
  virtual void remove(const std::string& id) = 0;
};

// A model's state as GET /v1/models/NAME reports it while it is not simply served.
struct ModelState {
  std::string state;   // "queued", "loading", "removing", "removed", "failed"
  std::string detail;  // what it is doing, or why it failed
};

class HttpServer {
 public:
  HttpServer(Engine& engine, std::vector<ServedModel> models, ServerOptions options, ServerRecording recording = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket and begins the recorded run; returns the port. Throws IoError when
  // the address cannot be bound (nothing is recorded then).
  int bind();
  // Serves until stop() (from another thread or a signal watcher); returns when it has stopped.
  void run();
  // Stops taking requests (new ones get 503), lets running ones finish for up to `grace_seconds`,
  // cancels the rest, then closes the socket, writes what the log holds and finishes the run.
  // Thread-safe, idempotent.
  void stop(double grace_seconds);

  // Model management: `changes` (owned by the caller, outliving the server) takes the changes; null:
  // POST and DELETE on /v1/models answer 403. Call before bind().
  void set_model_changes(ModelChanges* changes);
  // The models served from now on (thread-safe): requests for others are 404, requests running keep
  // theirs. `runtime`: the engine's from its next step (what /metrics reads).
  void set_models(std::vector<ServedModel> models, std::shared_ptr<Runtime> runtime);
  // What GET /v1/models/NAME says of a model not (or no longer) served; ready models clear theirs.
  void set_model_state(const std::string& id, ModelState state);
  // Stops admitting `id` and waits until its requests have finished, cancelling those still running
  // after `grace_seconds`. Returns how many were cancelled. Thread-safe; not from the engine's thread.
  int withdraw(const std::string& id, double grace_seconds);
  // A change carried out: how long from the request to serving the new family, and what it copied
  // (/metrics counts them).
  void record_model_change(const ModelChange& change);

  const ServerMetrics& metrics() const;
  std::int64_t recorded() const;  // requests written to the record so far
  std::int64_t run_id() const;    // the recorded run (after bind()); 0 when not recording

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mosaic::server
