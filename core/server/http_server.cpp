#include "server/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/error.h"
#include "model/text_stream.h"
#include "server/http_transport.h"
#include "server/openai_api.h"
#include "server/served_models.h"
#include "server/server_metrics.h"
#include "server/stop_text.h"
#include "store/recorder.h"

namespace mosaic::server {
namespace {

using nlohmann::json;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Compares every byte whatever differs first, so the time taken says nothing about the key.
bool same_key(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

std::string sse(const json& j) { return "data: " + wire(j) + "\n\n"; }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(wire(error_body(e)), "application/json");
}

// The methods the server takes on `path` ("GET, POST"), as its routes below are registered; "" for a
// path it does not serve.
std::string methods_of(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions") return "POST";
  if (path == "/v1/models") return "GET, POST";
  if (path.starts_with("/v1/models/") && path.size() > 11) return "GET, DELETE";
  if (path == "/health" || path == "/metrics") return "GET";
  return "";
}

}  // namespace

// Named, not anonymous: HttpServer::Impl holds these, and a class with linkage holding types without
// it is what GCC's -Wsubobject-linkage flags (in the unity build, where this file reads as a header).
namespace http_server_parts {

// One request in flight. The engine's thread only hands it token ids and the result; turning them
// into text, stop strings and JSON happens on the connection's thread, off the batch's critical path.
struct Call {
  Call(ApiRequest a, std::shared_ptr<const ServedModel> m) : api(std::move(a)), hold(std::move(m)), model(hold.get()), text(model->tokenizer), stop(api.stop) {}
  ApiRequest api;
  std::shared_ptr<const ServedModel> hold;  // kept while the call lasts, whatever the server serves by then
  const ServedModel* model;
  std::string id;
  std::int64_t created = 0, prompt_tokens = 0;
  std::shared_ptr<RequestHandle> handle;

  // Shared with the engine's callbacks.
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::int64_t> tokens;  // sampled, not yet taken
  bool done = false;
  RequestResult result;
  std::atomic<bool> stopped_by_text{false};  // set before the cancel it causes
  // The tokens that made the text up to its stop string, set before stopped_by_text: the engine may
  // sample a few more before the cancel lands, and those are not the answer's.
  std::atomic<std::size_t> tokens_to_stop{0};
  std::atomic<bool> withdrawn{false};        // cancelled because its model was removed
  std::string text_error;  // under m: why its text could not be made, set before the cancel it causes

  // The connection's text failed (take() threw): the request is cancelled and ends failed.
  void fail_text(const std::string& why) {
    {
      std::lock_guard lock(m);
      text_error = why;
    }
    handle->cancel();
  }

  // The connection's own.
  TextStream text;
  StopText stop;
  bool first = true, closed = false;
  std::size_t tokens_read = 0;  // made into text so far
  std::string whole;  // not streamed: the text so far
  std::optional<TextEvents> events;  // streamed: every text event after the first

  // Tokens handed over before the connection is woken: a stream's first at once, then every
  // `interval`; a whole answer without stop strings only at its end (finished() wakes it).
  std::size_t interval = 1;
  bool first_pushed = false, ready = false;  // ready: enough tokens for the connection to take

  void push(std::int64_t token) {
    bool wake = false;
    {
      std::lock_guard lock(m);
      tokens.push_back(token);
      wake = !first_pushed || tokens.size() >= interval;
      first_pushed = true;
      ready = ready || wake;
    }
    if (wake) cv.notify_one();
  }

  // Waits up to `wait` for tokens or the end, and turns what came into text: SSE events when
  // streamed (returned, to be written in one go), `whole` otherwise. Once the request has ended
  // and its last event is returned, `closed` is set.
  std::string take(std::chrono::milliseconds wait) {
    std::vector<std::int64_t> got;
    bool ended = false;
    {
      std::unique_lock lock(m);
      cv.wait_for(lock, wait, [&] { return ready || done; });
      ready = false;
      got.swap(tokens);
      ended = done;
    }
    std::string out, pieces;  // what came since the last wake goes out as one event
    for (std::int64_t t : got) {
      if (stopped_by_text) break;
      pieces += stop.push(text.push(t));
      ++tokens_read;
      if (stop.stopped()) {
        tokens_to_stop = tokens_read;
        stopped_by_text = true;
        handle->cancel();
      }
    }
    add_text(pieces, out);
    if (ended) finish(out);
    return out;
  }

  // The answer's tokens, as usage counts them: up to its stop string. The engine may have sampled a
  // few more before the cancel landed, or run on to its end when this thread saw the stop late;
  // /metrics and the record count those too (they took the engine's time).
  std::int64_t answer_tokens() const {
    const std::size_t all = result.tokens.size();
    return static_cast<std::int64_t>(stopped_by_text && tokens_to_stop > 0 ? std::min<std::size_t>(tokens_to_stop, all) : all);
  }

  // OpenAI's finish_reason of a request that ended with its text whole.
  std::string finish_reason() const { return stopped_by_text || result.finish == Finish::Stop ? "stop" : "length"; }

 private:
  void add_text(const std::string& piece, std::string& out) {
    if (piece.empty()) return;
    if (!api.stream) {
      whole += piece;
      return;
    }
    if (first) {
      out += sse(stream_chunk(api, id, created, piece, std::nullopt, true));
      first = false;
      return;
    }
    if (!events) events.emplace(api, id, created);
    out += events->event(piece);
  }

  void finish(std::string& out) {
    if (!stopped_by_text) {
      // The decoder's held-back bytes can complete a stop string too: then the answer stopped.
      const std::string tail = stop.push(text.finish());
      if (stop.stopped()) {
        tokens_to_stop = tokens_read;
        stopped_by_text = true;
      }
      add_text(tail + stop.finish(), out);
    }
    closed = true;
    if (!api.stream) return;
    if (result.finish == Finish::Failed) {
      out += sse(error_body(ApiError(500, "server_error", "", result.error)));
    } else if (result.finish == Finish::Cancelled && !stopped_by_text) {
      // Only the shutdown or the model's removal cancels a stream whose client still listens: say
      // so, so that the client raises instead of taking the text so far as the whole answer.
      out += sse(error_body(withdrawn ? ApiError(404, "invalid_request_error", "model", "the model '" + model->id + "' was removed before the request finished", "model_not_found")
                                      : ApiError(503, "server_error", "", "the server shut down before the request finished; retry on another instance")));
    } else {
      out += sse(stream_chunk(api, id, created, "", finish_reason(), false));
      if (api.include_usage) out += sse(usage_chunk(api, id, created, {prompt_tokens, answer_tokens()}));
    }
    out += "data: [DONE]\n\n";
  }
};

// httplib's routing and parsing, handed requests the transport read whole.
class Router : public httplib::Server {
 public:
  // httplib ends a streamed response early while its listening socket is INVALID_SOCKET (its sign of
  // shutting down); this server's listening socket is the transport's, so the router's never is. The
  // value is only compared: stop(), which would close it, is never called.
  Router() { svr_sock_ = 0; }
  bool serve(httplib::Stream& stream, bool close, bool& closed) { return process_request(stream, close, closed, nullptr); }
};

}  // namespace http_server_parts
using http_server_parts::Call;
using http_server_parts::Router;

namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// A refusal the transport sends itself, in OpenAI's error shape, closing the connection.
std::string refusal_response(int status, const std::string& why) {
  const std::string body = wire(error_body(ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", "", why)));
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                  "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (status == 503) r += "Retry-After: 1\r\n";
  return r + "\r\n" + body;
}

// Requests that answer at once from what the server holds: they have workers of their own, so a
// load balancer's health check answers while every other worker streams.
bool light_request(std::string_view method, std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  return method == "GET" && (path == "/health" || path == "/metrics" || path == "/v1/models" || path.starts_with("/v1/models/"));
}

ApiError not_served(const std::string& id) {
  return ApiError(404, "invalid_request_error", "model", "The model '" + id + "' does not exist (GET /v1/models lists those served)", "model_not_found");
}

json model_object(const ServedModel& m) {
  return {{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", "mosaic"}, {"root", m.base.empty() ? m.id : m.base},
          {"parent", m.base.empty() ? json() : json(m.base)}};
}

std::string status_of(const RequestResult& r, bool stopped_by_text) {
  if (stopped_by_text) return "ok";
  switch (r.finish) {
    case Finish::Length:
    case Finish::Stop: return "ok";
    case Finish::Cancelled: return "cancelled";
    case Finish::Failed: return "failed";
  }
  return "failed";
}

}  // namespace

struct HttpServer::Impl {
  Engine* engine = nullptr;
  ServerOptions opt;
  ServerRecording recording;
  std::int64_t run_id = 0;
  std::unique_ptr<RequestLog> log;  // made by bind(), once the run is begun
  Router http;
  std::unique_ptr<HttpTransport> transport;
  ServerMetrics metrics;
  std::atomic<std::size_t> admitted{0};
  std::atomic<int> streaming{0};  // streams whose response is not yet over (their last events unwritten)
  std::atomic<bool> draining{false};
  std::atomic<std::uint64_t> next_id{1};
  std::mutex live_m;
  std::map<const RequestHandle*, std::shared_ptr<Call>> live;  // submitted, not finished
  std::once_flag stopped;

  // What is served, under models_m: the models, the runtime serving them (whose KV blocks and host
  // tier /metrics reads, on the engine's thread), each model's requests submitted and not finished,
  // and the states of models being added or removed.
  mutable std::mutex models_m;
  std::vector<std::shared_ptr<const ServedModel>> models;
  std::shared_ptr<Runtime> runtime_now;
  std::map<std::string, int> in_flight;
  std::map<std::string, ModelState> states;
  ModelChanges* changes = nullptr;

  std::shared_ptr<const ServedModel> find(const std::string& id) const {
    std::lock_guard lock(models_m);
    for (const auto& m : models)
      if (m->id == id) return m;
    return nullptr;
  }
  std::shared_ptr<Runtime> runtime() const {
    std::lock_guard lock(models_m);
    return runtime_now;
  }
  // Counts a request in for its model, unless the model stopped being served since it was found.
  bool enter(const std::string& id) {
    std::lock_guard lock(models_m);
    for (const auto& m : models)
      if (m->id == id) {
        ++in_flight[id];
        return true;
      }
    return false;
  }
  void leave(const std::string& id) {
    std::lock_guard lock(models_m);
    if (--in_flight[id] <= 0) in_flight.erase(id);
  }
  int running(const std::string& id) const {
    std::lock_guard lock(models_m);
    const auto it = in_flight.find(id);
    return it == in_flight.end() ? 0 : it->second;
  }

  void authorize(const httplib::Request& req) const {
    if (opt.api_key.empty()) return;
    const std::string h = req.get_header_value("Authorization");
    // The scheme's name is case-insensitive (RFC 9110 §11.1); the key is compared exactly.
    constexpr std::string_view scheme = "bearer ";
    const bool bearer = h.size() > scheme.size() && std::equal(scheme.begin(), scheme.end(), h.begin(), [](char a, char b) {
                          return a == static_cast<char>(std::tolower(static_cast<unsigned char>(b)));
                        });
    if (!bearer || !same_key(h.substr(scheme.size()), opt.api_key))
      throw ApiError(401, "invalid_request_error", "", "Incorrect API key provided (send it as 'Authorization: Bearer KEY')", "invalid_api_key");
  }

  void update_gauges() {
    const std::size_t waiting = engine->queued(), in = admitted.load();
    metrics.set_sequences(static_cast<std::int64_t>(in > waiting ? in - waiting : 0), static_cast<std::int64_t>(waiting));
  }

  // Engine thread: the request ended. Counts it, hands it to the log, and wakes its connection.
  void finished(const std::shared_ptr<Call>& call, const RequestHandle& handle, const RequestResult& original) {
    const bool by_text = call->stopped_by_text;
    RequestResult result = original;
    {
      std::lock_guard lock(call->m);
      if (!call->text_error.empty()) {  // cancelled because its text failed: it failed
        result.finish = Finish::Failed;
        result.error = call->text_error;
      }
    }
    metrics.finished(call->model->id, status_of(result, by_text), result.stats);
    const std::shared_ptr<Runtime> rt = runtime();
    metrics.set_kv_blocks(rt->kv_blocks().used());
    const std::shared_ptr<const HostStore> store = rt->shared_store();  // a change served in place may hand over another
    metrics.set_host_tier(store->tier().stats(), store->tier().budget());
    RequestRecord rec;
    rec.target = call->model->id;
    rec.outcome = by_text ? Finish::Stop : result.finish;
    rec.error = result.error;
    rec.stats = result.stats;
    log->add(std::move(rec));
    {
      std::lock_guard lock(live_m);
      live.erase(&handle);
    }
    {
      std::lock_guard lock(call->m);
      call->result = result;
      call->done = true;
    }
    call->cv.notify_all();
    leave(call->model->id);
    --admitted;
  }

  // The chat as the model reads it; a template's refusal is the client's to fix.
  static std::vector<std::int64_t> prompt_of_chat(const ServedModel& m, const std::vector<ChatMessage>& messages) {
    try {
      return chat_prompt_ids(m, messages);
    } catch (const InvalidArgument& e) {
      throw bad_request("messages", e.problem());
    }
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    // /metrics counts under served models' names only, and one fixed label for every other name:
    // label series made from what clients send would grow without bound.
    std::string model_id = "unknown";
    try {
      authorize(req);
      if (draining) throw ApiError(503, "server_error", "", "the server is shutting down; retry on another instance");
      ApiRequest api;
      std::string named;
      try {
        api = parse_request(req.body, chat, &named);
      } catch (const ApiError&) {
        if (const auto m = find(named)) model_id = m->id;  // a served model's bad parameter is counted under its name
        throw;
      }
      const std::shared_ptr<const ServedModel> m = find(api.model);
      if (m) model_id = m->id;
      if (!m) throw not_served(api.model);
      auto call = std::make_shared<Call>(std::move(api), m);
      // Stop strings are found on the connection's thread, so a request with some is looked at
      // every token (or every interval, streamed), lest the engine run past one.
      call->interval = call->api.stream ? opt.stream_interval : call->api.stop.empty() ? std::numeric_limits<std::size_t>::max() : 1;
      const ApiRequest& a = call->api;
      GenerationRequest g;
      if (!a.prompt_ids.empty()) g.prompt = a.prompt_ids;
      else if (chat) g.prompt = prompt_of_chat(*m, a.messages);
      else g.prompt = m->tokenizer.encode(a.prompt_text);
      const char* prompt_param = chat ? "messages" : "prompt";
      if (g.prompt.empty()) throw bad_request(prompt_param, std::string("'") + prompt_param + "' encodes to no tokens");
      const auto n = static_cast<std::int64_t>(g.prompt.size());
      if (n >= m->context)
        throw bad_request(prompt_param, "the prompt is " + std::to_string(n) + " tokens; the model's context is " + std::to_string(m->context));
      g.max_new_tokens = a.max_tokens.value_or(chat ? m->context - n : 16);
      if (n + g.max_new_tokens > m->context)
        throw bad_request(chat && !a.max_tokens ? "messages" : "max_tokens",
                          "the prompt's " + std::to_string(n) + " tokens and max_tokens " + std::to_string(g.max_new_tokens) +
                              (a.max_tokens ? "" : " (its default, as OpenAI's)") + " pass the model's context of " + std::to_string(m->context) +
                              " tokens" + (a.max_tokens ? "" : ": send a smaller max_tokens, or a shorter prompt"));
      g.sampling = a.sampling;
      if (!a.ignore_eos) g.stop_ids = m->eos_ids;
      call->prompt_tokens = n;
      call->created = unix_now();
      call->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);

      if (admitted.fetch_add(1) >= opt.max_requests) {
        --admitted;
        throw ApiError(429, "rate_limit_error", "", "the server is serving " + std::to_string(opt.max_requests) + " requests; retry shortly",
                       "rate_limit_exceeded");
      }
      if (draining) {  // stop() began after the check above: it counts on admitted requests being in `live` soon
        --admitted;
        throw ApiError(503, "server_error", "", "the server is shutting down; retry on another instance");
      }
      if (!enter(m->id)) {  // removed since it was found
        --admitted;
        throw not_served(m->id);
      }
      RequestCallbacks cb;
      cb.on_token = [this, call](const RequestHandle&, std::int64_t token, const RuntimeCounters&) {
        call->push(token);
        metrics.set_kv_blocks(runtime()->kv_blocks().used());
      };
      cb.on_finish = [this, call](const RequestHandle& h, const RequestResult& r) { finished(call, h, r); };
      try {
        call->handle = engine->submit(ServeRequest{m->id, g}, cb);
      } catch (const Error& e) {
        leave(m->id);
        --admitted;
        throw bad_request(prompt_param, e.what());
      }
      {
        std::lock_guard lock(live_m);
        if (!call->handle->finished()) live.emplace(call->handle.get(), call);
      }
      if (a.stream) return stream(call, res);
      try {
        while (!call->closed) call->take(std::chrono::milliseconds(250));
      } catch (const std::exception& e) {  // the text could not be made: nothing is left to generate for
        const std::string why = std::string("the answer could not be made into text: ") + e.what();
        call->fail_text(why);
        throw ApiError(500, "server_error", "", why);
      }
      const RequestResult& r = call->result;
      if (r.finish == Finish::Failed) throw ApiError(500, "server_error", "", r.error);
      if (r.finish == Finish::Cancelled && !call->stopped_by_text && call->withdrawn)
        throw ApiError(404, "invalid_request_error", "model", "the model '" + m->id + "' was removed before the request finished", "model_not_found");
      if (r.finish == Finish::Cancelled && !call->stopped_by_text) throw ApiError(503, "server_error", "", "the request was cancelled: the server is shutting down");
      res.set_content(wire(completion_body(a, call->id, call->created, call->whole, call->finish_reason(), {n, call->answer_tokens()})),
                      "application/json");
    } catch (const ApiError& e) {
      if (e.status != 429 && e.status != 503 && e.status != 401) metrics.rejected(model_id, "invalid");
      else metrics.rejected(model_id, e.status == 401 ? "unauthorized" : "refused");
      send_error(res, e);
    }
  }

  // Server-sent events, one chunk per piece of text, what has come since the last write written in
  // one go; a client gone mid-stream cancels its request (its KV blocks are freed after the step in
  // flight).
  void stream(const std::shared_ptr<Call>& call, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    ++streaming;
    res.set_chunked_content_provider(
        "text/event-stream",
        [call](std::size_t, httplib::DataSink& sink) {
          // httplib does not catch what a content provider throws: the process would end. A failure
          // here ends this stream with OpenAI's error event instead.
          auto failed = [&](const std::string& why) {
            call->fail_text(why);
            call->closed = true;
            return sse(error_body(ApiError(500, "server_error", "", why))) + "data: [DONE]\n\n";
          };
          std::string out;
          try {
            out = call->take(std::chrono::milliseconds(250));
          } catch (const std::exception& e) {
            out = failed(std::string("the answer could not be made into text: ") + e.what());
          } catch (...) {
            out = failed("the answer could not be made into text");
          }
          if (out.empty() ? !sink.is_writable() : !sink.write(out.data(), out.size())) {
            call->handle->cancel();
            return false;
          }
          if (call->closed) sink.done();
          return true;
        },
        [this, call](bool) {
          if (!call->handle->finished()) call->handle->cancel();
          --streaming;
        });
  }

  // GET /v1/models/NAME: a served model's object with "status": "ready", else the state of a change.
  json model_status(const std::string& id) const {
    if (const auto m = find(id)) {
      json j = model_object(*m);
      j["status"] = "ready";
      return j;
    }
    std::lock_guard lock(models_m);
    const auto it = states.find(id);
    if (it == states.end()) throw not_served(id);
    json j{{"id", id}, {"object", "model"}, {"status", it->second.state}};
    if (!it->second.detail.empty()) j["detail"] = it->second.detail;
    return j;
  }

  ModelChanges& changes_on() const {
    if (!changes)
      throw ApiError(403, "invalid_request_error", "", "this server's models cannot be changed: start `mosaic-cli serve` with --allow-model-changes",
                     "model_changes_off");
    return *changes;
  }
  bool changing(const std::string& id) const {  // under models_m
    const auto it = states.find(id);
    return it != states.end() && (it->second.state == "queued" || it->second.state == "loading" || it->second.state == "removing");
  }

  // POST /v1/models {"id": NAME, "path": DIR}: 202 once the folder is found to fit the family; the
  // model is served once GET /v1/models/NAME says "ready".
  void add_model(const httplib::Request& req, httplib::Response& res) {
    try {
      authorize(req);
      if (draining) throw ApiError(503, "server_error", "", "the server is shutting down");
      ModelChanges& c = changes_on();
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::exception&) {
        throw bad_request("", "the body is not JSON: send {\"id\": NAME, \"path\": DIR}");
      }
      if (!body.is_object()) throw bad_request("", "the body must be a JSON object {\"id\": NAME, \"path\": DIR}");
      for (const char* key : {"id", "path"})
        if (!body.contains(key) || !body[key].is_string() || body[key].get<std::string>().empty())
          throw bad_request(key, std::string("'") + key + "' must be a non-empty string");
      for (const auto& [key, _] : body.items())
        if (key != "id" && key != "path") throw bad_request(key, "'" + key + "' is not a field of a model to add (id, path)");
      const std::string id = body["id"].get<std::string>();
      {
        std::lock_guard lock(models_m);
        for (const auto& m : models)
          if (m->id == id) throw ApiError(409, "invalid_request_error", "id", "the model '" + id + "' is served already", "model_exists");
        if (changing(id)) throw ApiError(409, "invalid_request_error", "id", "the model '" + id + "' is being " + states.at(id).state + " already", "model_changing");
        states[id] = {"queued", "checking the folder"};
      }
      try {
        c.add(id, body["path"].get<std::string>());
      } catch (const Error& e) {
        std::lock_guard lock(models_m);
        states.erase(id);
        throw bad_request(e.subject() == "id" ? "id" : "path", e.what());
      }
      res.status = 202;
      res.set_content(wire(model_status(id)), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  // DELETE /v1/models/NAME: not admitted from now on; 202, and removed once its requests are over.
  void remove_model(const httplib::Request& req, httplib::Response& res) {
    try {
      authorize(req);
      if (draining) throw ApiError(503, "server_error", "", "the server is shutting down");
      ModelChanges& c = changes_on();
      const std::string id = req.matches[1];
      std::shared_ptr<const ServedModel> was;
      {
        std::lock_guard lock(models_m);
        if (changing(id)) throw ApiError(409, "invalid_request_error", "model", "the model '" + id + "' is being " + states.at(id).state + " already", "model_changing");
        const auto it = std::find_if(models.begin(), models.end(), [&](const auto& m) { return m->id == id; });
        if (it == models.end()) throw not_served(id);
        if (models.size() == 1) throw ApiError(409, "invalid_request_error", "model", "'" + id + "' is the last model served; add another first", "last_model");
        was = *it;
        models.erase(it);  // admitted no more
        states[id] = {"removing", "waiting for its requests to finish"};
      }
      try {
        c.remove(id);
      } catch (const Error& e) {
        std::lock_guard lock(models_m);
        models.push_back(was);
        states.erase(id);
        throw ApiError(409, "invalid_request_error", "model", e.what(), "model_changing");
      }
      res.status = 202;
      res.set_content(wire(json{{"id", id}, {"object", "model"}, {"deleted", false}, {"status", "removing"}}), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  void routes() {
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.status = draining ? 503 : 200;
      res.set_content(wire(json{{"status", draining ? "draining" : "ok"}}), "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        authorize(req);
        json data = json::array();
        std::lock_guard lock(models_m);
        for (const auto& m : models) data.push_back(model_object(*m));
        res.set_content(wire(json{{"object", "list"}, {"data", data}}), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        authorize(req);
        res.set_content(wire(model_status(req.matches[1])), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { add_model(req, res); });
    http.Delete(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) { remove_model(req, res); });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        authorize(req);
        update_gauges();
        if (transport) metrics.set_connections(transport->counts());
        res.set_content(metrics.text(), "text/plain; version=0.0.4");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
    // What httplib answers itself (an unknown path, a body over the limit, a malformed request line)
    // gets OpenAI's error shape too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      // A route asked with a method it does not take (GET /v1/chat/completions) is a 405 naming the
      // ones it does, not a 404 saying it does not exist.
      if (res.status == 404)
        if (const std::string allow = methods_of(req.path); !allow.empty()) {
          res.status = 405;
          res.set_header("Allow", allow);
          res.set_content(wire(error_body(ApiError(405, "invalid_request_error", "", req.method + " " + req.path + " is not served: use " + allow))),
                          "application/json");
          return;
        }
      const std::string what = res.status == 404   ? "no route " + req.method + " " + req.path + " (see /v1/models, /v1/completions, /v1/chat/completions)"
                               : res.status == 413 ? "the body is larger than the server accepts"
                                                   : "the request could not be read";
      res.set_content(wire(error_body(ApiError(res.status, "invalid_request_error", "", what))), "application/json");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = std::string("internal error: ") + e.what();
      } catch (...) {
      }
      res.status = 500;
      res.set_content(wire(error_body(ApiError(500, "server_error", "", what))), "application/json");
    });
  }
};

HttpServer::HttpServer(Engine& engine, std::vector<ServedModel> models, ServerOptions options, ServerRecording recording)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.runtime_now = engine.runtime();
  s.engine = &engine;
  for (ServedModel& m : models) s.models.push_back(std::make_shared<const ServedModel>(std::move(m)));
  s.opt = std::move(options);
  s.recording = std::move(recording);
  s.metrics.set_host_tier(s.runtime_now->store().tier().stats(), s.runtime_now->store().tier().budget());
  TransportOptions t;
  t.workers = s.opt.threads > 0 ? static_cast<std::size_t>(s.opt.threads) : s.opt.max_requests + 8;  // every admitted stream, and room to refuse
  t.max_body_bytes = s.opt.max_body_bytes;
  t.read_timeout_seconds = s.opt.read_timeout_seconds;
  t.max_connections = s.opt.max_connections;
  t.max_per_client = s.opt.max_per_client;
  s.http.set_payload_max_length(s.opt.max_body_bytes);
  s.transport = std::make_unique<HttpTransport>(
      t, [&s](httplib::Stream& stream, bool close, bool& closed) { return s.http.serve(stream, close || s.draining, closed); }, light_request,
      refusal_response);
  s.routes();
}

HttpServer::~HttpServer() { stop(0); }

int HttpServer::bind() {
  Impl& s = *impl_;
  const int port = s.transport->bind(s.opt.host, s.opt.port);
  if (s.recording.recorder) s.run_id = s.recording.recorder->begin_run("serve", s.recording.config_json);
  s.log = std::make_unique<RequestLog>(s.recording.recorder, s.run_id, std::move(s.recording.observer));
  return port;
}

void HttpServer::run() {
  Impl& s = *impl_;
  s.transport->run();  // returns at once when stop() came first
}

void HttpServer::stop(double grace_seconds) {
  Impl& s = *impl_;
  std::call_once(s.stopped, [&] {
    s.draining = true;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds);
    while (s.admitted > 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // Cancel what still runs, again and again until every admitted request has finished: one
    // admitted a moment ago may not be in `live` yet, and the engine's callbacks reach this server
    // until then (they must not outlive it).
    const auto cancelled = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (s.admitted > 0 && std::chrono::steady_clock::now() < cancelled) {
      std::vector<std::shared_ptr<RequestHandle>> rest;
      {
        std::lock_guard lock(s.live_m);
        for (const auto& [_, call] : s.live) rest.push_back(call->handle);
      }
      for (const auto& h : rest) h->cancel();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Every stream writes its last events (an error saying the server shut down, then [DONE]) before
    // the connections close, a slow reader for 2 s at most.
    const auto written = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (s.streaming > 0 && std::chrono::steady_clock::now() < written) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Then every connection closes, slow clients' included, and run() returns.
    s.transport->stop();
    if (!s.log) return;  // never bound
    s.log->flush();
    if (s.recording.recorder) try {
        // A server that served nothing has no run to average in: "empty", which reports leave out.
        s.recording.recorder->finish_run(s.run_id, s.log->recorded() > 0 ? "finished" : "empty");
      } catch (const Error& e) {
        std::cerr << "serve: the record's run could not be closed: " << e.what() << "\n";
      }
  });
}

void HttpServer::set_model_changes(ModelChanges* changes) { impl_->changes = changes; }

void HttpServer::set_models(std::vector<ServedModel> models, std::shared_ptr<Runtime> runtime) {
  Impl& s = *impl_;
  std::vector<std::shared_ptr<const ServedModel>> served;
  for (ServedModel& m : models) served.push_back(std::make_shared<const ServedModel>(std::move(m)));
  std::lock_guard lock(s.models_m);
  for (const auto& m : served) s.states.erase(m->id);
  s.models = std::move(served);
  if (runtime) s.runtime_now = std::move(runtime);
}

void HttpServer::set_model_state(const std::string& id, ModelState state) {
  std::lock_guard lock(impl_->models_m);
  impl_->states[id] = std::move(state);
}

int HttpServer::withdraw(const std::string& id, double grace_seconds) {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.models_m);
    std::erase_if(s.models, [&](const auto& m) { return m->id == id; });
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds);
  while (s.running(id) > 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  int cancelled = 0;
  while (s.running(id) > 0) {  // past the grace: cancelled, again until each has finished (one may be about to be live)
    std::vector<std::shared_ptr<Call>> rest;
    {
      std::lock_guard lock(s.live_m);
      for (const auto& [_, call] : s.live)
        if (call->model->id == id) rest.push_back(call);
    }
    for (const auto& call : rest)
      if (!call->withdrawn.exchange(true)) {
        ++cancelled;
        call->handle->cancel();
      }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cancelled;
}

void HttpServer::record_model_change(const ModelChange& change) { impl_->metrics.model_changed(change); }

const ServerMetrics& HttpServer::metrics() const { return impl_->metrics; }
std::int64_t HttpServer::recorded() const { return impl_->log ? impl_->log->recorded() : 0; }
std::int64_t HttpServer::run_id() const { return impl_->run_id; }

}  // namespace mosaic::server
