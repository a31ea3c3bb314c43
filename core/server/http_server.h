#pragma once
// An OpenAI-compatible HTTP server over one Engine: GET /v1/models, POST /v1/completions and
// /v1/chat/completions (streamed as server-sent events or whole), GET /metrics (Prometheus), GET
// /health. The variant is chosen per request by `model`. Every request that reaches the engine is
// recorded to SQLite when a Recorder is given, as one run of strategy "serve".
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "runtime/engine.h"

namespace mosaic {
class Recorder;
}

namespace mosaic::server {

class ServerMetrics;

struct ServedModel {
  std::string id;    // what `model` names: a variant's or an adapter's folder name
  std::string base;  // an adapter's or delta folder's base ("" for a full variant)
  Tokenizer tokenizer;
  std::vector<std::int64_t> eos_ids;
  std::int64_t context = 0;  // max_position_embeddings
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (bind() says which)
  std::string api_key;                 // empty: no key asked for
  std::size_t max_requests = 256;      // admitted at once (running and waiting); past it 429
  std::size_t max_body_bytes = 1 << 20;
  int threads = 0;                     // HTTP worker threads (0: max_requests + 8, so streams never starve)
};

class HttpServer {
 public:
  // `recorder` may be null; when given it is used from the engine's thread only, and `run_id` is the
  // run the requests are recorded under.
  HttpServer(Engine& engine, std::vector<ServedModel> models, ServerOptions options, Recorder* recorder = nullptr,
             std::int64_t run_id = 0);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws IoError when the address cannot be bound.
  int bind();
  // Serves until stop() (from another thread or a signal watcher); returns when it has stopped.
  void run();
  // Stops taking requests (new ones get 503), lets running ones finish for up to `grace_seconds`,
  // cancels the rest, then closes the socket. Thread-safe, idempotent.
  void stop(double grace_seconds);

  const ServerMetrics& metrics() const;
  std::int64_t recorded() const;  // requests written to the record so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mosaic::server
