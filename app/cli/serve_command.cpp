// mosaic-cli serve: the engine behind an OpenAI-compatible HTTP API, until Ctrl-C or SIGTERM.
#include <nlohmann/json.hpp>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/model_changes.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "common/error.h"
#include "model/tokenizer.h"
#include "runtime/threads.h"
#include "server/http_server.h"
#include "server/served_models.h"
#include "server/server_metrics.h"
#include "store/recorder.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the variants over an OpenAI-compatible HTTP API (/v1/models, /v1/completions, "
                                          "/v1/chat/completions, /metrics, /health) until Ctrl-C or SIGTERM");
  struct Opts {
    ServingArgs serve;
    server::ServerOptions http;
    fs::path db;
    int threads = 0;
    double grace = 10;
    bool plain_chat = false;
    bool allow_model_changes = false;
  };
  auto o = std::make_shared<Opts>();
  o->serve.add_to(cmd, /*with_model=*/true, /*with_target=*/false);
  cmd->add_option("--host", o->http.host, "address to listen on (127.0.0.1: this machine only)")->default_val("127.0.0.1");
  cmd->add_option("--port", o->http.port, "port (0: any free one, printed)")->default_val(8000)->check(CLI::Range(0, 65535));
  CLI::Option* api_key = cmd->add_option("--api-key", o->http.api_key, "require 'Authorization: Bearer KEY' (also read from MOSAIC_API_KEY)")->envname("MOSAIC_API_KEY");
  cmd->add_option("--max-requests", o->http.max_requests, "requests admitted at once; past it 429 with Retry-After")
      ->default_val(64)->check(CLI::Range(1, 4096));
  cmd->add_option("--db", o->db, "record every request to this SQLite file (a run of strategy 'serve')");
  cmd->add_option("--grace", o->grace, "seconds running requests may finish after SIGTERM or Ctrl-C")->default_val(10)->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--read-timeout", o->http.read_timeout_seconds, "seconds a client has to send a request's head and body (408 past it)")
      ->default_val(10)->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--max-connections", o->http.max_connections,
                  "client connections open at once; at the cap one idle for a second gives way, else the slowest request arriving, else the new one gets 503")
      ->default_val(512)->check(CLI::Range(1, 900));
  cmd->add_option("--max-per-client", o->http.max_per_client, "connections from one address (raise it behind a reverse proxy; /health, /metrics and /v1/models get 4 more)")
      ->default_val(256)->check(CLI::Range(1, 900));
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--stream-interval", o->http.stream_interval,
                  "tokens per streamed event after the first: fewer wake-ups and writes per token, text in larger steps")
      ->default_val(1)->check(CLI::Range(1, 1024));
  cmd->add_flag("--allow-model-changes", o->allow_model_changes,
                "take POST /v1/models {\"id\", \"path\"} and DELETE /v1/models/NAME (behind --api-key when one is set): the family is "
                "re-planned with the folder added or removed, under the same flags, and served between steps (needs --variants with "
                "--capacity or --budget)");
  cmd->add_flag("--plain-chat", o->plain_chat,
                "format chat requests as 'role: content' lines even where a model's tokenizer_config.json has a chat template");
  cmd->callback([o, api_key] {
    // A key given empty (`--api-key "$KEY"` with KEY unset, or MOSAIC_API_KEY=) would serve with no key at all.
    const char* env_key = std::getenv("MOSAIC_API_KEY");
    if (o->http.api_key.empty() && (api_key->count() > 0 || env_key != nullptr))
      throw InvalidArgument(api_key->count() > 0 ? "--api-key" : "MOSAIC_API_KEY", "", "is empty, which would serve without a key",
                            "give the key, or leave out --api-key and MOSAIC_API_KEY to serve without one");
    check_output(o->db, "--db", o->serve.inputs(), OutputKind::Database);
    // The signals are waited for on a thread of their own: blocked here, before any thread starts,
    // so that every thread inherits the mask.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    // A client gone mid-write fails that write (EPIPE), which cancels its request; it must not end the server.
    signal(SIGPIPE, SIG_IGN);
    std::unique_ptr<Recorder> recorder;
    if (!o->db.empty()) {
      recorder = std::make_unique<Recorder>(o->db);
      recorder->check_writable();
    }
    configure_threads(o->threads);
    const auto session = open_serving(o->serve, /*need_target=*/false);
    std::vector<server::ServedModel> models = server::served_models(session->family, *session->store, !o->plain_chat);
    const std::size_t model_count = models.size();
    std::vector<std::string> served;  // the family, as a report tells setups apart
    for (const server::ServedModel& m : models) served.push_back(m.id);
    server::HttpServer http(*session->engine, std::move(models), o->http,
                            {.recorder = recorder.get(),
                             .config_json = nlohmann::json{{"kind", "serve"}, {"host", o->http.host}, {"port", o->http.port}, {"variants", served}}.dump()});
    std::unique_ptr<FamilyChanges> changes;  // destroyed before the server: its thread calls it
    if (o->allow_model_changes) {
      changes = std::make_unique<FamilyChanges>(o->serve, *session, http, !o->plain_chat, o->grace);
      http.set_model_changes(changes.get());
    }
    const int port = http.bind();
    std::atomic<bool> over{false};
    std::thread watcher([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      if (over) return;
      std::cerr << "serve: " << (sig == SIGTERM ? "SIGTERM" : "interrupted") << ": finishing running requests (up to " << o->grace << " s)\n";
      http.stop(o->grace);
    });
    // An IPv6 address is bracketed in a URL; 0.0.0.0 and :: listen everywhere but are no address to ask.
    const std::string& host = o->http.host;
    const std::string url_host = host == "0.0.0.0" || host == "::" ? "127.0.0.1" : host.find(':') != std::string::npos ? "[" + host + "]" : host;
    std::cout << "serving on http://" << url_host << ":" << port << "/v1 (" << model_count << " models"
              << (url_host != host ? ", listening on every address" : "") << ")" << std::endl;
    if (o->allow_model_changes && o->http.api_key.empty() && host != "127.0.0.1" && host != "::1" && host != "localhost")
      std::cerr << "serve: warning: --allow-model-changes without --api-key on " << host
                << ": anyone who reaches this port may add any folder this machine can read as a model\n";
    http.run();
    // run() returns when stopped: by the watcher, or by the listening socket failing.
    over = true;
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
    http.stop(0);  // a no-op after the watcher's; either way the request log is written out and the run finished here
    changes.reset();  // a change in progress finishes first
    std::cerr << "serve: stopped; " << http.metrics().finished_summary() << (recorder ? "; " + std::to_string(http.recorded()) + " recorded" : "")
              << "\n";
  });
}

}  // namespace mosaic::cli
