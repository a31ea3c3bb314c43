// mosaic-cli bench-serve: what serving over HTTP costs. The same closed-loop workload (each client
// sends its next request when the last one ends) runs at each client count twice: submitted to the
// engine in-process, and streamed from `serve`'s HttpServer over loopback TCP by client threads that
// speak HTTP/1.1 and read server-sent events. Throughput and TTFT are compared in the same run.
#include <nlohmann/json.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/serving_args.h"
#include "common/atomic_file.h"
#include "common/error.h"
#include "common/machine.h"
#include "runtime/threads.h"
#include "server/http_server.h"
#include "server/served_models.h"
#include "serving/metrics.h"
#include "common/stopwatch.h"

namespace fs = std::filesystem;

namespace mosaic::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Workload {
  std::vector<std::string> models;
  std::string prompt;
  int max_tokens = 32;
  int requests = 0;  // at this client count
};

struct Measured {
  double seconds = 0;
  std::int64_t tokens = 0;
  std::vector<double> ttft;
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0; }
};

// `clients` threads share `w.requests` requests, each calling `one(index)` → (ttft, tokens) in turn.
template <class One>
Measured closed_loop(int clients, const Workload& w, One&& one) {
  Measured m;
  m.ttft.resize(static_cast<std::size_t>(w.requests));
  std::atomic<int> next{0};
  std::atomic<std::int64_t> tokens{0};
  std::string failure;
  std::mutex failure_m;
  const auto t0 = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&] {
        for (int i; (i = next++) < w.requests;) {
          try {
            const auto [ttft, n] = one(i);
            m.ttft[static_cast<std::size_t>(i)] = ttft;
            tokens += n;
          } catch (const std::exception& e) {
            std::lock_guard lock(failure_m);
            failure = e.what();
          }
        }
      });
  }
  m.seconds = seconds_since(t0);
  m.tokens = tokens;
  if (!failure.empty()) throw InvalidArgument("bench-serve", "", "a request failed: " + failure);
  return m;
}

// One streamed completion over HTTP/1.1 on a fresh loopback connection: (TTFT, tokens generated).
std::pair<double, std::int64_t> http_completion(int port, const std::string& body) {
  const auto t0 = Clock::now();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    throw IoError("127.0.0.1:" + std::to_string(port), "", "refused the connection", "");
  }
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t at = 0; at < req.size();) {
    const ssize_t n = ::send(fd, req.data() + at, req.size() - at, MSG_NOSIGNAL);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  std::string got;
  double ttft = -1;
  char buf[16384];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<std::size_t>(n));
    if (ttft < 0 && got.find("data: {") != std::string::npos) ttft = seconds_since(t0);
  }
  ::close(fd);
  // The usage chunk says how many tokens came; a stream without it did not finish.
  const std::size_t u = got.rfind("\"completion_tokens\":");
  if (!got.starts_with("HTTP/1.1 200") || u == std::string::npos || got.find("data: [DONE]") == std::string::npos)
    throw IoError("http://127.0.0.1:" + std::to_string(port) + "/v1/completions", "", "did not stream a whole answer: " + got.substr(0, 300), "");
  return {ttft, std::stoll(got.substr(u + 20))};
}

}  // namespace

void add_bench_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-serve",
                                 "What serving over HTTP costs: throughput and TTFT of the same closed-loop workload "
                                 "streamed through the OpenAI-compatible server and submitted in-process, at each client count");
  struct Opts {
    ServingArgs serve;
    std::vector<int> clients{1, 2, 4, 8, 16, 32, 64};
    int per_client = 4, min_requests = 32, max_tokens = 32, reps = 2, threads = 0, stream_interval = 1;
    std::string prompt = "In the beginning";
    fs::path json;
  };
  auto o = std::make_shared<Opts>();
  o->serve.add_to(cmd);
  // Each client is a thread of this process and a connection the server holds: past 1024 the
  // measurement is of the machine's thread limits, not of serving.
  cmd->add_option("--clients", o->clients, "client counts to measure (1 to 1024)")->default_str("1 2 4 8 16 32 64")->check(CLI::Range(1, 1024));
  cmd->add_option("--per-client", o->per_client, "requests per client (at least --min-requests in all)")->default_val(4)->check(CLI::Range(1, 1000));
  cmd->add_option("--min-requests", o->min_requests, "requests per measurement at least")->default_val(32)->check(CLI::Range(1, 100000));
  cmd->add_option("--max-tokens", o->max_tokens, "tokens each request generates (EOS ignored)")->default_val(32)->check(CLI::Range(1, 100000));
  cmd->add_option("--prompt", o->prompt, "the prompt of every request")->default_val("In the beginning");
  cmd->add_option("--reps", o->reps, "repetitions, alternating in-process and HTTP; the best of each is reported")->default_val(2)->check(CLI::Range(1, 20));
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--stream-interval", o->stream_interval, "the server's tokens per streamed event after the first (as serve's)")
      ->default_val(1)->check(CLI::Range(1, 1024));
  cmd->add_option("--json", o->json, "also write the measurements to this JSON file");
  cmd->callback([o] {
    check_output(o->json, "--json", o->serve.inputs());
    configure_threads(o->threads);
    const auto session = open_serving(o->serve, /*need_target=*/false);
    std::vector<server::ServedModel> models = server::served_models(session->family, *session->store);
    if (models.empty()) throw InvalidArgument("bench-serve", "", "the session serves no variant", "give --variants");
    Workload w;
    for (const auto& m : models) w.models.push_back(m.id);
    w.prompt = o->prompt;
    w.max_tokens = o->max_tokens;
    // Each target's prompt as the server encodes it, so both paths run the same tokens.
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& m : models) prompts.push_back(m.tokenizer.encode(o->prompt));

    server::ServerOptions so;
    so.port = 0;
    so.max_requests = 1 << 16;
    so.threads = *std::max_element(o->clients.begin(), o->clients.end()) + 8;
    so.stream_interval = static_cast<std::size_t>(o->stream_interval);
    server::HttpServer http(*session->engine, std::move(models), so);
    const int port = http.bind();
    std::thread serving([&] { http.run(); });

    Engine& engine = *session->engine;
    auto in_process = [&](int i) -> std::pair<double, std::int64_t> {
      const std::size_t t = static_cast<std::size_t>(i) % w.models.size();
      GenerationRequest g;
      g.prompt = prompts[t];
      g.max_new_tokens = w.max_tokens;
      const auto t0 = Clock::now();
      auto first = std::make_shared<std::atomic<double>>(-1.0);
      RequestCallbacks cb;
      cb.on_token = [first, t0](const RequestHandle&, std::int64_t, const RuntimeCounters&) {
        double none = -1.0;
        first->compare_exchange_strong(none, seconds_since(t0));
      };
      const auto handle = engine.submit(ServeRequest{w.models[t], g}, cb);  // held: wait() returns into it
      const RequestResult& r = handle->wait();
      if (r.finish == Finish::Failed || r.finish == Finish::Cancelled) throw InvalidArgument("bench-serve", w.models[t], r.error);
      return {first->load(), static_cast<std::int64_t>(r.tokens.size())};
    };
    auto over_http = [&](int i) {
      const nlohmann::json body{{"model", w.models[static_cast<std::size_t>(i) % w.models.size()]},
                                {"prompt", w.prompt},
                                {"max_tokens", w.max_tokens},
                                {"temperature", 0},
                                {"ignore_eos", true},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}};
      return http_completion(port, body.dump());
    };
    // Warm both paths (first-touch of weights, the server's threads).
    w.requests = static_cast<int>(w.models.size());
    closed_loop(1, w, in_process);
    closed_loop(1, w, over_http);

    std::cout << "bench-serve: " << w.models.size() << " targets, prompt '" << w.prompt << "' (" << prompts[0].size() << " tokens), "
              << w.max_tokens << " tokens each, " << o->stream_interval << " per event, best of " << o->reps << "; " << machine_description() << "\n\n"
              << "clients  requests  in-process tok/s  HTTP tok/s  overhead  TTFT p50 / p90 in-process (ms)  TTFT p50 / p90 HTTP (ms)\n";
    nlohmann::json rows = nlohmann::json::array();
    for (int clients : o->clients) {
      w.requests = std::max(o->min_requests, clients * o->per_client);
      Measured best_local, best_http;
      for (int rep = 0; rep < o->reps; ++rep) {
        const Measured local = closed_loop(clients, w, in_process);
        const Measured remote = closed_loop(clients, w, over_http);
        if (local.tokens_per_second() > best_local.tokens_per_second()) best_local = local;
        if (remote.tokens_per_second() > best_http.tokens_per_second()) best_http = remote;
      }
      const Percentiles tl = percentiles(best_local.ttft), th = percentiles(best_http.ttft);
      const double overhead = 1.0 - best_http.tokens_per_second() / best_local.tokens_per_second();
      char line[256];
      std::snprintf(line, sizeof line, "%7d  %8d  %16.0f  %10.0f  %7.1f%%  %14.1f / %-14.1f  %11.1f / %.1f\n", clients, w.requests,
                    best_local.tokens_per_second(), best_http.tokens_per_second(), 100 * overhead, 1e3 * tl.p50, 1e3 * tl.p90, 1e3 * th.p50,
                    1e3 * th.p90);
      std::cout << line << std::flush;
      rows.push_back({{"clients", clients},
                      {"requests", w.requests},
                      {"in_process_tokens_per_second", best_local.tokens_per_second()},
                      {"http_tokens_per_second", best_http.tokens_per_second()},
                      {"overhead", overhead},
                      {"in_process_ttft", {{"p50", tl.p50}, {"p90", tl.p90}, {"p99", tl.p99}}},
                      {"http_ttft", {{"p50", th.p50}, {"p90", th.p90}, {"p99", th.p99}}}});
    }
    http.stop(0);
    serving.join();
    if (!o->json.empty())
      write_file_atomically(o->json, [&](std::ostream& out) {
        out << nlohmann::json{{"machine", machine_description()}, {"targets", w.models}, {"max_tokens", w.max_tokens},
                             {"stream_interval", o->stream_interval}, {"rows", rows}}.dump(2)
            << "\n";
      });
  });
}

}  // namespace mosaic::cli
