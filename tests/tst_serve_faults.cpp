// `mosaic-cli serve` under load and under trouble, through the real binary and raw sockets: 64
// streaming clients at once against a bounded queue, clients killed mid-stream, a client that reads
// one byte at a time, oversized bodies, garbage on the socket, and SIGTERM while streams run. After
// each the server still serves, what /metrics counts is what the record holds, and the record is
// intact. (The openai client's view of the same server is tests/node/openai.test.mjs.)
#include <QProcess>
#include <QScopeGuard>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <tuple>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <latch>
#include <map>
#include <random>
#include <thread>

#include "cli_process.h"
#include "http_client.h"
#include "test_support.h"

using namespace mosaic::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

const fs::path family = fs::path(MOSAIC_SOURCE_DIR) / "resources" / "sample-family";
const std::vector<std::string> models{"base", "bible", "fortunes", "esft-bible"};

// `ignore_eos` (vLLM's extension) makes every request run its max_tokens, whatever it samples.
std::string completion(const std::string& model, int max_tokens, bool stream, double temperature = 0) {
  return json{{"model", model},   {"prompt", "In the beginning"}, {"max_tokens", max_tokens},
              {"stream", stream}, {"temperature", temperature},   {"ignore_eos", true}}
      .dump();
}

// A stream that ended as the API promises: text chunks, one finish_reason, then [DONE].
bool complete_stream(const Response& r, std::string* text = nullptr) {
  if (r.status != 200) return false;
  const auto ev = r.events();
  if (ev.size() < 2 || ev.back() != "[DONE]") return false;
  std::string reason;
  for (std::size_t i = 0; i + 1 < ev.size(); ++i) {
    const json j = json::parse(ev[i], nullptr, false);
    if (j.is_discarded() || !j.contains("choices")) return false;
    for (const json& c : j["choices"]) {
      if (text) *text += c.value("text", "");
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) reason = c["finish_reason"];
    }
  }
  return reason == "length" || reason == "stop";
}

// An answer that refuses for now and says when to come back.
bool refused(const Response& r) { return (r.status == 429 || r.status == 503) && r.headers.contains("retry-after"); }

// Prometheus samples by name and labels, e.g. {"mosaic_requests_total{model=\"bible\",status=\"ok\"}", 3};
// none when the scrape was refused.
std::map<std::string, double> metrics(int port) {
  std::map<std::string, double> out;
  const Response r = ask(port, http_request("GET", "/metrics"));
  if (r.status != 200) return out;
  std::size_t at = 0;
  while (at < r.body.size()) {
    const std::size_t eol = std::min(r.body.find('\n', at), r.body.size());
    const std::string line = r.body.substr(at, eol - at);
    at = eol + 1;
    const std::size_t space = line.rfind(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

// Requests counted by status, over every model.
std::map<std::string, std::int64_t> requests_by_status(const std::map<std::string, double>& m) {
  std::map<std::string, std::int64_t> out;
  for (const auto& [key, v] : m) {
    if (!key.starts_with("mosaic_requests_total{")) continue;
    const std::size_t s = key.find("status=\"") + 8;
    out[key.substr(s, key.find('"', s) - s)] += static_cast<std::int64_t>(v);
  }
  return out;
}

// The serve run's requests by (target, outcome as /metrics names it).
std::map<std::pair<std::string, std::string>, std::int64_t> recorded(const fs::path& db, std::string* run_status = nullptr) {
  std::map<std::pair<std::string, std::string>, std::int64_t> out;
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return out;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h,
                     "SELECT target, CASE WHEN outcome IN ('length', 'stop') THEN 'ok' ELSE outcome END, COUNT(*) FROM requests "
                     "WHERE run_id = (SELECT MAX(id) FROM runs WHERE strategy = 'serve') GROUP BY 1, 2",
                     -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW)
    out[{reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), reinterpret_cast<const char*>(sqlite3_column_text(st, 1))}] =
        sqlite3_column_int64(st, 2);
  sqlite3_finalize(st);
  st = nullptr;
  if (run_status && sqlite3_prepare_v2(h, "SELECT status FROM runs WHERE strategy = 'serve' ORDER BY id DESC LIMIT 1", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    *run_status = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

// The same counts as /metrics gives them.
std::map<std::pair<std::string, std::string>, std::int64_t> counted(const std::map<std::string, double>& m) {
  std::map<std::pair<std::string, std::string>, std::int64_t> out;
  for (const auto& [key, v] : m) {
    if (!key.starts_with("mosaic_requests_total{")) continue;
    const std::size_t a = key.find("model=\"") + 7, s = key.find("status=\"") + 8;
    const std::string status = key.substr(s, key.find('"', s) - s);
    if (status == "ok" || status == "cancelled" || status == "failed") out[{key.substr(a, key.find('"', a) - a), status}] += static_cast<std::int64_t>(v);
  }
  return out;
}

// Waits until `ready` holds, polling /metrics; returns the last sample.
std::map<std::string, double> metrics_when(int port, const std::function<bool(const std::map<std::string, double>&)>& ready, int seconds = 30) {
  const auto give_up = Clock::now() + std::chrono::seconds(seconds);
  auto m = metrics(port);
  while (!ready(m) && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m = metrics(port);
  }
  return m;
}

}  // namespace

// Outside the anonymous namespace: the cases' lambdas capture it, and a unity build includes this
// file, where GCC warns of a captured type with internal linkage (-Wsubobject-linkage).
namespace serve_faults {

// `mosaic-cli serve` on a free port, serving the sample family's variants and an adapter.
class Server {
 public:
  // Serves the sample family's `models`, or the folders in `variants`.
  explicit Server(const QStringList& extra, const std::vector<fs::path>& variants = {}) {
    QStringList a{QStringLiteral("serve"), QStringLiteral("--variants")};
    if (variants.empty())
      for (const std::string& m : models) a << path(family / m);
    for (const fs::path& v : variants) a << path(v);
    a << QStringLiteral("--capacity") << QStringLiteral("16") << QStringLiteral("--port") << QStringLiteral("0") << extra;
    p_.setProcessChannelMode(QProcess::SeparateChannels);
    p_.start(QStringLiteral(MOSAIC_CLI), a);
    const auto give_up = Clock::now() + std::chrono::seconds(60);
    QByteArray out;
    while (port_ == 0 && Clock::now() < give_up && p_.state() != QProcess::NotRunning) {
      p_.waitForReadyRead(200);
      out += p_.readAllStandardOutput();
      const qsizetype at = out.indexOf("serving on http://127.0.0.1:");
      if (at >= 0 && out.indexOf("/v1", at) > at) port_ = out.mid(at + 28, out.indexOf("/v1", at) - at - 28).toInt();
    }
  }
  ~Server() {
    if (p_.state() != QProcess::NotRunning) {
      p_.kill();
      p_.waitForFinished(10000);
    }
  }
  int port() const { return port_; }
  QString errors() { return QString::fromUtf8(p_.readAllStandardError()); }
  void signal_term() { ::kill(static_cast<pid_t>(p_.processId()), SIGTERM); }
  // SIGTERM; the exit code (-1 when it did not exit within `seconds`, or crashed).
  int terminate(int seconds) {
    p_.terminate();
    return wait_exit(seconds);
  }
  int wait_exit(int seconds) {
    if (!p_.waitForFinished(seconds * 1000) || p_.exitStatus() != QProcess::NormalExit) return -1;
    return p_.exitCode();
  }
  bool running() const { return p_.state() == QProcess::Running; }

 private:
  QProcess p_;
  int port_ = 0;
};

}  // namespace serve_faults
using serve_faults::Server;

class TestServeFaults : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  fs::path scratch(const std::string& name) const { return fs::path(tmp_.path().toStdString()) / name; }

  // The server answers a plain request as before.
  static void stillServes(int port) {
    QCOMPARE(ask(port, http_request("GET", "/health")).status, 200);
    const Response r = ask(port, http_request("POST", "/v1/completions", completion("fortunes", 4, false)));
    QCOMPARE(r.status, 200);
    QCOMPARE(json::parse(r.body)["usage"]["completion_tokens"].get<int>(), 4);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    qputenv("MOSAIC_CACHE_DIR", QByteArray::fromStdString(scratch("cache").string()));
  }

  // 64 streaming clients at once, mixed over three variants and an adapter, against a server that
  // admits 16: each completes or is refused with Retry-After; /metrics counts what the record holds.
  void sixtyFourStreamingClients() {
    const fs::path db = scratch("load.sqlite");
    Server s({QStringLiteral("--max-requests"), QStringLiteral("16"), QStringLiteral("--db"), path(db)});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    constexpr int clients = 64;
    std::vector<Response> answers(clients);
    std::latch start(clients);
    const auto t0 = Clock::now();
    {
      std::vector<std::jthread> threads;
      for (int i = 0; i < clients; ++i)
        threads.emplace_back([&, i] {
          const std::string req = http_request("POST", "/v1/completions", completion(models[i % models.size()], 8 + i % 8, true, 0.8));
          start.arrive_and_wait();  // all at once
          answers[i] = ask(s.port(), req);
        });
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    int completed = 0, refusals = 0;
    std::map<std::pair<std::string, std::string>, std::int64_t> seen;  // what the clients saw, as /metrics counts it
    for (int i = 0; i < clients; ++i) {
      if (complete_stream(answers[i])) {
        ++completed;
        ++seen[{models[i % models.size()], "ok"}];
      } else if (refused(answers[i])) {
        ++refusals;
      } else {
        QFAIL(qPrintable(QStringLiteral("client %1: neither a complete stream nor a refusal: status %2, %3")
                             .arg(i).arg(answers[i].status).arg(QString::fromStdString(answers[i].body.substr(0, 300)))));
      }
    }
    qInfo("64 clients: %d completed, %d refused with Retry-After, in %.2f s", completed, refusals, seconds);
    QVERIFY(completed >= 16);
    QVERIFY2(seconds < 120, "64 short requests took over two minutes");

    // Settled: nothing running, every KV block back, and the counts agree three ways.
    const auto m = metrics_when(s.port(), [](const auto& m) { return m.at("mosaic_sequences_running") == 0 && m.at("mosaic_kv_blocks_used") == 0; });
    QCOMPARE(m.at("mosaic_sequences_running"), 0.0);
    QCOMPARE(m.at("mosaic_kv_blocks_used"), 0.0);
    QCOMPARE(m.at("mosaic_sequences_waiting"), 0.0);
    QCOMPARE(requests_by_status(m)["refused"], refusals);
    QCOMPARE(counted(m), seen);
    stillServes(s.port());
    ++seen[{"fortunes", "ok"}];
    QCOMPARE(s.terminate(30), 0);
    std::string status;
    QCOMPARE(recorded(db, &status), seen);
    QCOMPARE(status, std::string("finished"));
    QCOMPARE(integrity_check(db), std::string("ok"));
  }

  // --stream-interval 4: after the first, each event carries the tokens of four steps; the text is
  // the same, the first token still comes alone.
  void streamIntervalGroupsTokens() {
    Server s({QStringLiteral("--stream-interval"), QStringLiteral("4")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const Response streamed = ask(s.port(), http_request("POST", "/v1/completions", completion("bible", 33, true)));
    const Response whole = ask(s.port(), http_request("POST", "/v1/completions", completion("bible", 33, false)));
    std::string text;
    QVERIFY(complete_stream(streamed, &text));
    QCOMPARE(text, json::parse(whole.body)["choices"][0]["text"].get<std::string>());
    int events = 0;
    for (const std::string& e : streamed.events()) events += e.find("\"text\":\"") != std::string::npos && e.find("\"text\":\"\"") == std::string::npos;
    // 1 + 32/4 text events at most (+1 for a held-back tail), against 33 at an interval of 1.
    QVERIFY2(events >= 2 && events <= 10, qPrintable(QString::number(events)));
    QCOMPARE(s.terminate(30), 0);
  }

  // Under a host budget the tier starts empty: the first misses read their experts from disk, and
  // /metrics counts them per layer beside the tier's residency, which stays within the budget.
  void hostBudgetDiskLoadsAreCounted() {
    Server s({QStringLiteral("--host-budget"), QStringLiteral("64MiB")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const double budget = 64.0 * 1024 * 1024;
    QCOMPARE(metrics(s.port())["mosaic_host_budget_bytes"], budget);  // before any request
    stillServes(s.port());
    const auto m = metrics(s.port());
    double disk = 0;
    for (const auto& [key, v] : m)
      if (key.starts_with("mosaic_expert_disk_loads_total{")) disk += v;
    QVERIFY2(disk > 0, qPrintable(QString::number(disk)));
    QVERIFY(m.at("mosaic_expert_disk_bytes_total") > 0);
    QVERIFY(m.at("mosaic_host_resident_bytes") > 0 && m.at("mosaic_host_resident_bytes") <= budget);
    QCOMPARE(s.terminate(30), 0);
  }

  // A folder's tokenizer_config.json template writes the chat's prompt (an adapter takes its
  // base's); the template's refusal is a 400 in its own words; --plain-chat keeps the plain lines.
  void chatTemplatesWriteThePrompt() {
    const fs::path dir = scratch("templated");
    fs::create_directories(dir);
    for (const char* v : {"base", "bible", "esft-bible"}) fs::copy(family / v, dir / v, fs::copy_options::recursive);
    const auto write = [](const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; };
    // bible's template passes the user's words through alone; base's (and so the adapter's) frames them.
    write(dir / "bible" / "tokenizer_config.json", json{{"chat_template",
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m.content }}{% endfor %}"}}.dump());
    write(dir / "base" / "tokenizer_config.json", json{{"chat_template",
        "{% for m in messages %}{{ m.role | upper }}> {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT>{% endif %}"}}.dump());
    const std::vector<fs::path> variants{dir / "base", dir / "bible", dir / "esft-bible"};
    const auto chat = [](const std::string& model, const json& messages) {
      return json{{"model", model}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}}.dump();
    };
    const auto text_of = [](const Response& r, bool chat_reply) {
      const json j = json::parse(r.body);
      return chat_reply ? j["choices"][0]["message"]["content"].get<std::string>() : j["choices"][0]["text"].get<std::string>();
    };
    const auto completion_of = [](const std::string& model, const std::string& prompt) {
      return json{{"model", model}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}}.dump();
    };
    const json user = json::array({{{"role", "user"}, {"content", "In the beginning"}}});
    {
      Server s({}, variants);
      QVERIFY2(s.port() > 0, qPrintable(s.errors()));
      const Response templated = ask(s.port(), http_request("POST", "/v1/chat/completions", chat("bible", user)));
      QCOMPARE(templated.status, 200);
      const Response plain = ask(s.port(), http_request("POST", "/v1/completions", completion_of("bible", "In the beginning")));
      QCOMPARE(text_of(templated, true), text_of(plain, false));  // the prompt was the template's: the words alone
      for (const char* m : {"base", "esft-bible"}) {
        const Response framed = ask(s.port(), http_request("POST", "/v1/chat/completions", chat(m, user)));
        QCOMPARE(framed.status, 200);
        const Response same = ask(s.port(), http_request("POST", "/v1/completions", completion_of(m, "USER> In the beginning\nASSISTANT>")));
        QCOMPARE(text_of(framed, true), text_of(same, false));
        QVERIFY(json::parse(framed.body)["usage"]["prompt_tokens"] == json::parse(same.body)["usage"]["prompt_tokens"]);
      }
      const Response refused = ask(s.port(), http_request("POST", "/v1/chat/completions",
                                                          chat("bible", json::array({{{"role", "system"}, {"content", "Be brief."}}}))));
      QCOMPARE(refused.status, 400);
      const json e = json::parse(refused.body)["error"];
      QCOMPARE(e["param"].get<std::string>(), std::string("messages"));
      QVERIFY2(e["message"].get<std::string>().find("System role not supported") != std::string::npos, qPrintable(QString::fromStdString(refused.body)));
      QCOMPARE(s.terminate(30), 0);
    }
    {
      Server s({QStringLiteral("--plain-chat")}, variants);
      QVERIFY2(s.port() > 0, qPrintable(s.errors()));
      const Response lines = ask(s.port(), http_request("POST", "/v1/chat/completions", chat("bible", user)));
      const Response same = ask(s.port(), http_request("POST", "/v1/completions", completion_of("bible", "user: In the beginning\nassistant:")));
      QCOMPARE(text_of(lines, true), text_of(same, false));
      QCOMPARE(s.terminate(30), 0);
    }
    // A template Mosaic cannot read stops the server before it listens, naming the file and the way out.
    write(dir / "bible" / "tokenizer_config.json", json{{"chat_template", "{% for m in messages %}"}}.dump());
    QProcess p;
    QStringList a{QStringLiteral("serve"), QStringLiteral("--variants")};
    for (const fs::path& v : variants) a << path(v);
    p.start(QStringLiteral(MOSAIC_CLI), a << QStringLiteral("--capacity") << QStringLiteral("16") << QStringLiteral("--port") << QStringLiteral("0"));
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 2);
    const std::string err = p.readAllStandardError().toStdString();
    expect_mentions(err, {"bible/tokenizer_config.json", "endfor", "--plain-chat"});
  }

  // Clients killed (SIGKILL) in the middle of their streams: each request is cancelled and its KV
  // blocks are freed; the record counts them cancelled.
  void clientsKilledMidStream() {
    const fs::path db = scratch("killed.sqlite");
    Server s({QStringLiteral("--db"), path(db)});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    constexpr int n = 6;
    const std::string req = http_request("POST", "/v1/completions", completion("bible", 480, true, 1.0));
    int ready[2];
    QVERIFY(::pipe(ready) == 0);
    std::vector<pid_t> children;
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {  // async-signal-safe calls only: connect, ask, read the first token, say so, wait
        const int fd = connect_to(s.port());
        char buf[4096];
        if (fd >= 0 && send_all(fd, req)) {
          for (std::size_t got = 0; got < 2048;) {
            const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
            if (k <= 0) break;
            got += static_cast<std::size_t>(k);
          }
          (void)!::write(ready[1], "x", 1);
        }
        ::pause();
        ::_exit(0);
      }
      QVERIFY(pid > 0);
      children.push_back(pid);
    }
    ::close(ready[1]);
    char c;
    int streaming = 0;
    while (streaming < n && ::read(ready[0], &c, 1) == 1) ++streaming;
    ::close(ready[0]);
    const auto m_mid = metrics(s.port());
    for (pid_t pid : children) ::kill(pid, SIGKILL);
    for (pid_t pid : children) ::waitpid(pid, nullptr, 0);
    QCOMPARE(streaming, n);
    QVERIFY2(m_mid.at("mosaic_kv_blocks_used") > 0, "the streams held no KV blocks while they ran");

    const auto m = metrics_when(s.port(), [](const auto& m) {
      return requests_by_status(m)["cancelled"] == n && m.at("mosaic_sequences_running") == 0 && m.at("mosaic_kv_blocks_used") == 0;
    });
    QCOMPARE(requests_by_status(m)["cancelled"], static_cast<std::int64_t>(n));
    QCOMPARE(requests_by_status(m)["ok"], std::int64_t{0});
    QCOMPARE(m.at("mosaic_sequences_running"), 0.0);
    QCOMPARE(m.at("mosaic_kv_blocks_used"), 0.0);
    QVERIFY(m.at("mosaic_generated_tokens_total") < n * 480);  // they stopped early
    stillServes(s.port());
    QCOMPARE(s.terminate(30), 0);
    const auto rec = recorded(db);
    QCOMPARE(rec.at({"bible", "cancelled"}), static_cast<std::int64_t>(n));
    QCOMPARE(integrity_check(db), std::string("ok"));
  }

  // A client reading one byte at a time (a tiny receive window) gets its whole stream, text for
  // text the same as the answer in one piece, and does not hold up a client beside it.
  void slowReaderGetsItsWholeStream() {
    Server s({});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const Response whole = ask(s.port(), http_request("POST", "/v1/completions", completion("bible", 48, false)));
    QCOMPARE(whole.status, 200);
    const std::string expected = json::parse(whole.body)["choices"][0]["text"];

    const int fd = connect_to(s.port(), 60, 1024);
    QVERIFY(fd >= 0);
    QVERIFY(send_all(fd, http_request("POST", "/v1/completions", completion("bible", 48, true))));
    std::string raw;
    char byte;
    int other_status = 0;
    Clock::time_point other_done;
    std::jthread other([&] {
      other_status = ask(s.port(), http_request("POST", "/v1/completions", completion("fortunes", 4, false))).status;
      other_done = Clock::now();
    });
    std::size_t reads = 0;
    for (;; ++reads) {
      if (::recv(fd, &byte, 1, 0) != 1) break;
      raw += byte;
      if (reads % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // ~0.5 s for the stream
    }
    const auto slow_done = Clock::now();
    ::close(fd);
    other.join();
    QCOMPARE(other_status, 200);
    QVERIFY2(other_done < slow_done, "the client beside the slow reader waited for it");
    std::string text;
    QVERIFY2(complete_stream(parse_response(raw), &text), raw.substr(0, 400).c_str());
    QCOMPARE(text, expected);
    qInfo("slow reader: %zu one-byte reads", reads);
    stillServes(s.port());
  }

  // Bodies over 1 MB (and over 10), malformed and truncated requests and random bytes get a 4xx in OpenAI's
  // shape, or the connection closed; the server goes on serving.
  void oversizedAndGarbageRequests() {
    Server s({});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const int port = s.port();
    auto is_api_error = [](const Response& r, int status) {
      if (r.status != status) return false;
      const json j = json::parse(r.body, nullptr, false);
      return !j.is_discarded() && j.contains("error") && j["error"].contains("message") && j["error"].contains("type");
    };
    // One byte over the 1 MiB limit.
    const std::string big = json{{"model", "bible"}, {"prompt", std::string((1 << 20) - 20, 'a')}}.dump();
    QVERIFY(big.size() > (1u << 20));
    QVERIFY(is_api_error(ask(port, http_request("POST", "/v1/completions", big)), 413));
    // Ten times the limit: the server refuses at the head and drops the rest as it comes, so the 413
    // reaches the client instead of a reset (closing with the body still arriving had reset it).
    const std::string huge = json{{"model", "bible"}, {"prompt", std::string(10 << 20, 'a')}}.dump();
    for (int i = 0; i < 3; ++i) QVERIFY(is_api_error(ask(port, http_request("POST", "/v1/completions", huge)), 413));
    // Just under it: read whole, and refused for its length, not its size.
    const std::string under = json{{"model", "bible"}, {"prompt", std::string((1 << 20) - 64, 'a')}}.dump();
    QVERIFY(under.size() <= (1u << 20));
    const Response long_prompt = ask(port, http_request("POST", "/v1/completions", under));
    QVERIFY2(is_api_error(long_prompt, 400), long_prompt.body.c_str());
    QVERIFY(json::parse(long_prompt.body)["error"]["message"].get<std::string>().find("context") != std::string::npos);
    // Malformed JSON, and JSON of the wrong shape.
    QVERIFY(is_api_error(ask(port, http_request("POST", "/v1/completions", "{\"model\": \"bible\", \"prompt\": ")), 400));
    QVERIFY(is_api_error(ask(port, http_request("POST", "/v1/completions", "[1, 2, 3]")), 400));
    // A body shorter than its Content-Length, then silence: the server stops waiting (read timeout)
    // and meanwhile serves others.
    const int half = connect_to(port, 30);
    QVERIFY(send_all(half, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"model\""));
    stillServes(port);
    // Random bytes, as a request and after a valid request line.
    std::mt19937 rng(7);
    std::string noise(64 * 1024, '\0');
    for (char& ch : noise) ch = static_cast<char>(rng());
    for (const std::string& garbage : {noise, "GET /health HTTP/1.1\r\n" + noise, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11)}) {
      const Response r = ask(port, garbage, 30, true);
      QVERIFY2(r.status == 0 || (r.status >= 400 && r.status < 500), qPrintable(QString::number(r.status)));
    }
    // A path that is not UTF-8 is named in the 404's message, replaced where it is not.
    const Response odd_path = ask(port, http_request("GET", "/v1/\xff\xfe"));
    QVERIFY2(is_api_error(odd_path, 404), odd_path.body.c_str());
    // A route asked with a method it does not take: 405, and the methods it does take.
    for (const auto& [method, path, allow] : {std::tuple<std::string, std::string, std::string>{"GET", "/v1/chat/completions", "POST"},
                                              {"POST", "/metrics", "GET"}, {"PUT", "/v1/models/bible", "GET, DELETE"}}) {
      const Response r = ask(port, http_request(method, path));
      QVERIFY2(is_api_error(r, 405) && r.headers.contains("allow") && r.headers.at("allow") == allow, (method + " " + path + ": " + r.body).c_str());
      QVERIFY2(r.body.find("use " + allow) != std::string::npos, r.body.c_str());
    }
    // A header line longer than the server reads.
    const Response long_header = ask(port, "GET /health HTTP/1.1\r\nX-Long: " + std::string(64 * 1024, 'h') + "\r\n\r\n", 30, true);
    QVERIFY(long_header.status == 0 || (long_header.status >= 400 && long_header.status < 500));
    ::close(half);
    stillServes(port);
    QVERIFY(s.running());
  }

  // 200 connections that send their headers a line at a time and never finish (a probe's 100 took
  // every worker, and /health timed out at 15 s): /health answers within 1 s throughout, a completion
  // is served, and the slow ones end (408 at the read timeout, or closed at the per-client cap).
  void slowClientsCannotStarveTheServer() {
    Server s({QStringLiteral("--read-timeout"), QStringLiteral("3")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    constexpr int slow = 200;
    std::vector<int> fds;
    for (int i = 0; i < slow; ++i) {
      const int fd = connect_to(s.port(), 10);
      QVERIFY(fd >= 0);
      QVERIFY(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
      fds.push_back(fd);
    }
    double worst = 0;
    int checks = 0;
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < std::chrono::seconds(5)) {
      for (int fd : fds) (void)send_all(fd, "X-Slow: still here\r\n");  // a line each, never the blank one
      const auto h0 = Clock::now();
      const Response h = ask(s.port(), http_request("GET", "/health"), 1);
      worst = std::max(worst, std::chrono::duration<double>(Clock::now() - h0).count());
      QCOMPARE(h.status, 200);
      ++checks;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    QVERIFY2(worst < 1.0, qPrintable(QStringLiteral("/health took %1 s").arg(worst)));
    stillServes(s.port());
    // Past the read timeout every slow request has ended, with a 408 or by giving way at the cap.
    int ended = 0, timed_out = 0;
    for (int fd : fds) {
      const std::string raw = read_all(fd);
      ++ended;
      if (parse_response(raw).status == 408) ++timed_out;
      ::close(fd);
    }
    const auto m = metrics(s.port());
    qInfo("%d slow connections: /health answered %d times, at worst in %.0f ms; %d got 408; closed: %.0f timed out, %.0f evicted", slow,
          checks, worst * 1e3, timed_out, m.at("mosaic_http_connections_closed_total{reason=\"timed_out\"}"),
          m.at("mosaic_http_connections_closed_total{reason=\"evicted\"}"));
    QCOMPARE(ended, slow);
    QVERIFY(timed_out > 0);
    QCOMPARE(m.at("mosaic_http_connections_closed_total{reason=\"timed_out\"}") + m.at("mosaic_http_connections_closed_total{reason=\"evicted\"}"),
             static_cast<double>(slow));
    QVERIFY(s.running());
  }

  // SIGTERM with slow clients connected (a probe's server was still alive 30 s after SIGTERM with
  // --grace 2): every connection closes after the grace period, the process exits 0, the record is intact.
  void sigtermWithSlowClientsConnected() {
    const fs::path db = scratch("slow-term.sqlite");
    Server s({QStringLiteral("--grace"), QStringLiteral("2"), QStringLiteral("--db"), path(db)});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    stillServes(s.port());
    std::vector<int> fds;
    for (int i = 0; i < 50; ++i) {
      const int fd = connect_to(s.port(), 30);
      QVERIFY(fd >= 0);
      QVERIFY(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"model\""));
      fds.push_back(fd);
    }
    const auto t0 = Clock::now();
    s.signal_term();
    const int code = s.wait_exit(15);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    for (int fd : fds) {
      (void)read_all(fd);  // closed by the server: the read ends
      ::close(fd);
    }
    QCOMPARE(code, 0);
    QVERIFY2(took < 2 + 3, qPrintable(QStringLiteral("exited %1 s after SIGTERM").arg(took)));
    std::string status;
    QCOMPARE(recorded(db, &status), (std::map<std::pair<std::string, std::string>, std::int64_t>{{{"fortunes", "ok"}, 1}}));
    QCOMPARE(status, std::string("finished"));
    QCOMPARE(integrity_check(db), std::string("ok"));
  }

  // Names of models that are not served share one label in /metrics (a probe's 100 requests with
  // 900 kB names grew the server by 154 MB and one scrape to 90 MB), and a name longer than any served
  // one is a 400 before anything keeps it.
  void unknownModelsShareOneLabel() {
    Server s({});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    for (int i = 0; i < 100; ++i) {
      const Response r = ask(s.port(), http_request("POST", "/v1/completions", json{{"model", "no-such-model-" + std::to_string(i)}, {"prompt", "x"}}.dump()));
      QCOMPARE(r.status, 404);
    }
    const Response longer = ask(s.port(), http_request("POST", "/v1/completions", json{{"model", std::string(257, 'm')}, {"prompt", "x"}}.dump()));
    QCOMPARE(longer.status, 400);
    QCOMPARE(json::parse(longer.body)["error"]["param"].get<std::string>(), std::string("model"));
    const Response scrape = ask(s.port(), http_request("GET", "/metrics"));
    QVERIFY2(scrape.body.size() < 64 * 1024, qPrintable(QString::number(scrape.body.size())));
    // A served model's bad parameter is counted under its own name, not as an unknown model.
    QCOMPARE(ask(s.port(), http_request("POST", "/v1/completions", json{{"model", "bible"}, {"prompt", "x"}, {"temperature", -1}}.dump())).status, 400);
    const auto m = metrics(s.port());
    QCOMPARE(m.at("mosaic_requests_total{model=\"unknown\",status=\"invalid\"}"), 101.0);
    QCOMPARE(m.at("mosaic_requests_total{model=\"bible\",status=\"invalid\"}"), 1.0);
    for (const auto& [key, v] : m)
      if (key.starts_with("mosaic_requests_total{"))
        QVERIFY2(key.find("no-such-model") == std::string::npos && key.find("mmmm") == std::string::npos, key.c_str());
  }

  // A burst from one client past both caps (a newcomer's Promise.all of 65 requests with the openai
  // client left one hanging: the connection that gave way at the per-address cap was one accepted in
  // the same burst, its request unread, and was closed without a word). Every request gets an
  // answer: served, or refused with Retry-After.
  void aBurstPastTheCapsIsAnsweredEveryTime() {
    Server s({QStringLiteral("--max-per-client"), QStringLiteral("8"), QStringLiteral("--max-requests"), QStringLiteral("4"),
              QStringLiteral("--read-timeout"), QStringLiteral("3")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    constexpr int clients = 40;
    std::vector<Response> answers(clients);
    std::latch start(clients);
    {
      std::vector<std::jthread> threads;
      for (int i = 0; i < clients; ++i)
        threads.emplace_back([&, i] {
          const std::string req = http_request("POST", "/v1/completions", completion(models[i % models.size()], 4, false));
          start.arrive_and_wait();
          answers[i] = ask(s.port(), req, 60, /*then_close=*/true);
        });
    }
    int served = 0, refusals = 0;
    for (int i = 0; i < clients; ++i) {
      if (answers[i].status == 200) ++served;
      else if (refused(answers[i])) ++refusals;
      else QFAIL(qPrintable(QStringLiteral("client %1: no answer (status %2: %3)").arg(i).arg(answers[i].status).arg(QString::fromStdString(answers[i].body.substr(0, 200)))));
    }
    qInfo("%d requests at once against --max-per-client 8 --max-requests 4: %d served, %d refused with Retry-After", clients, served, refusals);
    QVERIFY(served >= 4);
    stillServes(s.port());
    // Slow clients that filled the address's cap and have settled give way to what comes next (each
    // told so with a 503): /health is answered, not refused.
    std::vector<int> slow;
    for (int i = 0; i < 8; ++i) {
      const int fd = connect_to(s.port(), 10);
      QVERIFY(fd >= 0 && send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
      slow.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    QCOMPARE(ask(s.port(), http_request("GET", "/health"), 10).status, 200);
    int told = 0;
    for (int fd : slow) {
      const Response r = parse_response(read_all(fd));
      if (r.status == 503) {
        ++told;  // the cap it was at: this address's, not the server's
        QVERIFY2(r.body.find("as many connections as one client may") != std::string::npos, r.body.c_str());
      }
      ::close(fd);
    }
    QVERIFY2(told >= 1, "a settled slow request gave way with a 503");
    QVERIFY(metrics(s.port()).at("mosaic_http_connections_closed_total{reason=\"evicted\"}") >= 1);
  }

  // An address at its cap still gets /health, /metrics and /v1/models answered (a monitor shares the
  // address of the load it watches behind a reverse proxy or on localhost; it was told 503, "full",
  // exactly while the server was busy), on a few connections past the cap that serve nothing else
  // while the cap holds, and anything once it no longer does.
  void aMonitorIsAnsweredPastItsAddressCap() {
    Server s({QStringLiteral("--max-per-client"), QStringLiteral("2"), QStringLiteral("--read-timeout"), QStringLiteral("8")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const int port = s.port();
    // Connections open, once what the test closed is closed (a scrape refused meanwhile reads as none).
    auto open_once_closed = [&](double expected) {
      const auto m = metrics_when(port, [&](const auto& m) { return m.contains("mosaic_http_connections") && m.at("mosaic_http_connections") <= expected; });
      return m.contains("mosaic_http_connections") ? m.at("mosaic_http_connections") : -1.0;
    };
    // The cap is held by two requests still arriving, which give way once settled for a second: the
    // checks must end within it (tried again on a machine too busy for that).
    struct Seen {
      int health = 0, models = 0, scrape = 0, fifth = 0;
      Response work;
      double seconds = 0;
    } seen;
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::vector<int> held, idle;
      for (int i = 0; i < 2; ++i) {
        const int fd = connect_to(port, 10);
        QVERIFY(fd >= 0 && send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
        held.push_back(fd);
      }
      const auto t0 = Clock::now();
      seen.health = ask(port, http_request("GET", "/health"), 5).status;
      seen.models = ask(port, http_request("GET", "/v1/models"), 5).status;
      const Response scrape = ask(port, http_request("GET", "/metrics"), 5);
      seen.scrape = scrape.body.find("\nmosaic_http_connections ") != std::string::npos ? scrape.status : -1;
      // Anything else past the cap is refused, saying why, with Retry-After.
      seen.work = ask(port, http_request("POST", "/v1/completions", completion("bible", 4, false)), 5);
      // The room is bounded: with four connections past the cap open, a fifth is refused at once
      // (accepted in the order they connected).
      for (int i = 0; i < 4; ++i) {
        const int fd = connect_to(port, 10);
        QVERIFY(fd >= 0);
        idle.push_back(fd);
      }
      const Response fifth = ask(port, http_request("GET", "/health"), 5);
      seen.fifth = refused(fifth) ? 503 : fifth.status;
      seen.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      for (int fd : idle) ::close(fd);
      for (int fd : held) ::close(fd);
      QCOMPARE(open_once_closed(1), 1.0);  // the scrape's own
      if (seen.seconds < 0.9) break;
    }
    QVERIFY2(seen.seconds < 0.9, qPrintable(QStringLiteral("three tries took over 0.9 s each (last %1 s): too busy a machine for this test").arg(seen.seconds)));
    QCOMPARE(seen.health, 200);
    QCOMPARE(seen.models, 200);
    QCOMPARE(seen.scrape, 200);
    QVERIFY2(refused(seen.work) && seen.work.status == 503, seen.work.body.c_str());
    QVERIFY2(seen.work.body.find("address") != std::string::npos, seen.work.body.c_str());
    QCOMPARE(seen.fifth, 503);

    // A monitor's kept-alive connection, once the address is under its cap again, serves anything.
    std::vector<int> held;
    for (int i = 0; i < 2; ++i) {
      const int fd = connect_to(port, 10);
      QVERIFY(fd >= 0 && send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
      held.push_back(fd);
    }
    const int monitor = connect_to(port, 10);
    QVERIFY(monitor >= 0 && send_all(monitor, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    std::string head;
    char c;
    while (head.find("\r\n\r\n") == std::string::npos && ::recv(monitor, &c, 1, 0) == 1) head += c;
    QVERIFY2(head.starts_with("HTTP/1.1 200"), head.c_str());
    const auto length = head.find("Content-Length: ");
    QVERIFY(length != std::string::npos);
    std::string body(static_cast<std::size_t>(std::stoi(head.substr(length + 16))), '\0');
    for (std::size_t got = 0; got < body.size();) {
      const ssize_t n = ::recv(monitor, body.data() + got, body.size() - got, 0);
      QVERIFY(n > 0);
      got += static_cast<std::size_t>(n);
    }
    for (int fd : held) ::close(fd);
    QCOMPARE(open_once_closed(2), 2.0);  // the monitor's and the scrape's
    QVERIFY(send_all(monitor, http_request("POST", "/v1/completions", completion("fortunes", 4, false))));
    const Response served = parse_response(read_all(monitor));
    ::close(monitor);
    QVERIFY2(served.status == 200, served.body.c_str());
    stillServes(port);
  }

  // Idle connections taken past an address's cap give way to its monitor once settled for a second,
  // as idle ones within the cap do: else a load's idle overflow would hold the monitor's room.
  void idleConnectionsPastTheCapGiveWayToAMonitor() {
    Server s({QStringLiteral("--max-per-client"), QStringLiteral("1"), QStringLiteral("--max-sequences"), QStringLiteral("1")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const int port = s.port();
    std::vector<int> ahead, idle;
    int held = -1;
    const auto close_all = qScopeGuard([&] {
      for (int fd : idle) ::close(fd);
      for (int fd : ahead) ::close(fd);  // their streams are cancelled
      if (held >= 0) ::close(held);
    });
    // Other clients' requests run first, one sequence at a time, so that this address's one request
    // within its cap stays with a worker (which no newcomer evicts) while the rest happens.
    for (int i = 0; i < 16; ++i) {
      ahead.push_back(connect_to(port, 60, 0, ("127.0.0." + std::to_string(2 + i)).c_str()));
      QVERIFY(ahead.back() >= 0 && send_all(ahead.back(), http_request("POST", "/v1/completions", completion("bible", 480, true))));
    }
    held = connect_to(port, 60);
    QVERIFY(held >= 0 && send_all(held, http_request("POST", "/v1/completions", completion("bible", 4, false))));
    for (int i = 0; i < 4; ++i) {
      idle.push_back(connect_to(port, 10));
      QVERIFY(idle.back() >= 0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1300));
    const Response monitor = ask(port, http_request("GET", "/health"), 5);
    char byte;
    const bool held_waiting = ::recv(held, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN;
    std::size_t given_way = 0;  // closed by the server, unanswered, as an idle connection may be
    for (int fd : idle) given_way += ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0 ? 1 : 0;
    for (int fd : idle) ::close(fd);
    idle.clear();
    for (int fd : ahead) ::close(fd);
    ahead.clear();
    const Response answered = parse_response(read_all(held));
    if (!held_waiting) QSKIP("the request within the cap was answered before the monitor asked (16 x 480 tokens in 1.3 s): too fast a machine for this test");
    QVERIFY2(monitor.status == 200, monitor.body.c_str());
    QCOMPARE(given_way, std::size_t{1});
    QVERIFY2(answered.status == 200, answered.body.c_str());
    stillServes(port);
  }

  // The answer's tokens end at its stop string: usage (and /metrics, the record) counts no token the
  // engine sampled after it before the cancel landed. The key's scheme is case-insensitive, and a
  // 401 says which scheme it wants.
  void usageEndsAtTheStopAndKeysAreBearer() {
    Server s({QStringLiteral("--api-key"), QStringLiteral("sekret")});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    auto with_key = [](std::string request, const std::string& auth) { return request.insert(request.find("\r\n") + 2, "Authorization: " + auth + "\r\n"); };
    const Response denied = ask(s.port(), http_request("GET", "/v1/models"));
    QCOMPARE(denied.status, 401);
    QVERIFY(denied.headers.contains("www-authenticate") && denied.headers.at("www-authenticate") == "Bearer");
    QCOMPARE(ask(s.port(), with_key(http_request("GET", "/v1/models"), "bearer sekret")).status, 200);
    QCOMPARE(ask(s.port(), with_key(http_request("GET", "/v1/models"), "Bearer sekreT")).status, 401);
    // The greedy answer's first three tokens, then the same request stopped where they end.
    auto ask_greedy = [&](int max_tokens, const json& stop) {
      json body{{"model", "bible"}, {"prompt", "And God said"}, {"max_tokens", max_tokens}, {"temperature", 0}};
      if (!stop.is_null()) body["stop"] = stop;
      const Response r = ask(s.port(), with_key(http_request("POST", "/v1/completions", body.dump()), "Bearer sekret"));
      return r.status == 200 ? json::parse(r.body) : json{{"status", r.status}, {"body", r.body}};
    };
    const json three = ask_greedy(3, nullptr);
    QVERIFY2(three.contains("choices"), three.dump().c_str());
    QCOMPARE(three["usage"]["completion_tokens"].get<int>(), 3);
    const std::string text = three["choices"][0]["text"];
    const json stopped = ask_greedy(40, text);
    QVERIFY2(stopped.contains("choices"), stopped.dump().c_str());
    QCOMPARE(stopped["choices"][0]["finish_reason"].get<std::string>(), std::string("stop"));
    QCOMPARE(stopped["choices"][0]["text"].get<std::string>(), std::string());
    QCOMPARE(stopped["usage"]["completion_tokens"].get<int>(), 3);
    // An empty key (`--api-key "$KEY"` with KEY unset) is refused, not taken as no key.
    Server open({QStringLiteral("--api-key"), QString()});
    QCOMPARE(open.port(), 0);
    QVERIFY2(open.errors().contains(QStringLiteral("--api-key")), "the refusal names the option");
  }

  // serve --allow-model-changes: a model added, used and removed while streams of another run; the
  // streams neither fail nor change their tokens. What cannot be done is refused with its reason.
  void modelsAreAddedAndRemovedWhileOthersStream() {
    auto state = [](int port, const std::string& id) {
      const Response r = ask(port, http_request("GET", "/v1/models/" + id));
      return r.status == 200 ? json::parse(r.body).value("status", "") : "http " + std::to_string(r.status);
    };
    auto until = [&](int port, const std::string& id, const std::string& want) {
      const auto give_up = Clock::now() + std::chrono::seconds(60);
      std::string now = state(port, id);
      while (now != want && Clock::now() < give_up && now != "failed") {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        now = state(port, id);
      }
      return now;
    };
    auto post = [](int port, const json& body) { return ask(port, http_request("POST", "/v1/models", body.dump())); };
    {
      Server off({});  // without the flag, nothing changes
      QVERIFY2(off.port() > 0, qPrintable(off.errors()));
      QCOMPARE(post(off.port(), {{"id", "jargon"}, {"path", path(family / "jargon").toStdString()}}).status, 403);
      QCOMPARE(ask(off.port(), http_request("DELETE", "/v1/models/bible")).status, 403);
      QCOMPARE(state(off.port(), "bible"), std::string("ready"));
    }
    // Strict hits: each model's own experts, so a re-plan cannot change a token (under consolidated
    // hits it changes which copies serve, and so may the text).
    Server s({QStringLiteral("--allow-model-changes"), QStringLiteral("--hit"), QStringLiteral("strict")}, {family / "base", family / "bible"});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const int port = s.port();
    const std::string body = completion("bible", 400, true);
    std::string alone;
    QVERIFY(complete_stream(ask(port, http_request("POST", "/v1/completions", body)), &alone));

    std::vector<std::string> texts(4);
    std::vector<int> whole(4, 0);
    std::vector<std::thread> streams;
    for (int i = 0; i < 4; ++i)
      streams.emplace_back([&, i] { whole[static_cast<std::size_t>(i)] = complete_stream(ask(port, http_request("POST", "/v1/completions", body)), &texts[static_cast<std::size_t>(i)]); });
    const Response added = post(port, {{"id", "fortunes"}, {"path", path(family / "fortunes").toStdString()}});
    QCOMPARE(added.status, 202);
    QCOMPARE(until(port, "fortunes", "ready"), std::string("ready"));
    // The streams straddle the change (else this test would show nothing about them).
    QVERIFY2(metrics(port).at("mosaic_sequences_running") > 0, "the streams ended before the model was added: make them longer");
    const Response used = ask(port, http_request("POST", "/v1/completions", completion("fortunes", 6, false)));
    QCOMPARE(used.status, 200);
    QCOMPARE(json::parse(used.body)["model"].get<std::string>(), std::string("fortunes"));
    QCOMPARE(ask(port, http_request("DELETE", "/v1/models/fortunes")).status, 202);
    QCOMPARE(until(port, "fortunes", "removed"), std::string("removed"));
    const Response gone = ask(port, http_request("POST", "/v1/completions", completion("fortunes", 6, false)));
    QCOMPARE(gone.status, 404);
    for (auto& t : streams) t.join();
    for (std::size_t i = 0; i < texts.size(); ++i) {
      QVERIFY2(whole[i], qPrintable(QString::number(i)));
      QCOMPARE(texts[i], alone);  // strict hits: the same tokens, wherever the experts moved
    }

    // Refused, each with its reason; the family is as it was.
    auto refused_with = [&](const Response& r, int status, const std::string& param) {
      const json e = json::parse(r.body, nullptr, false);
      return r.status == status && !e.is_discarded() && e["error"]["param"] == (param.empty() ? json() : json(param));
    };
    QVERIFY(refused_with(ask(port, http_request("POST", "/v1/models", "not json")), 400, ""));
    QVERIFY(refused_with(post(port, {{"id", "jargon"}}), 400, "path"));
    QVERIFY(refused_with(post(port, {{"id", "jargon"}, {"path", "/no/such/folder"}}), 400, "path"));
    QVERIFY(refused_with(post(port, {{"id", "argot"}, {"path", path(family / "jargon").toStdString()}}), 400, "id"));
    QVERIFY(refused_with(post(port, {{"id", "bible"}, {"path", path(family / "bible").toStdString()}}), 409, "id"));
    QVERIFY(refused_with(post(port, {{"id", "jargon"}, {"path", path(family / "jargon").toStdString()}, {"size", 1}}), 400, "size"));
    QCOMPARE(ask(port, http_request("DELETE", "/v1/models/no-such-model")).status, 404);
    QCOMPARE(ask(port, http_request("DELETE", "/v1/models/base")).status, 202);
    QCOMPARE(until(port, "base", "removed"), std::string("removed"));
    QVERIFY(refused_with(ask(port, http_request("DELETE", "/v1/models/bible")), 409, "model"));  // the last one
    QCOMPARE(ask(port, http_request("POST", "/v1/completions", completion("bible", 4, false))).status, 200);  // bible alone now
    const auto m = metrics(port);
    QCOMPARE(m.at("mosaic_model_changes_total{change=\"add\"}"), 1.0);
    QCOMPARE(m.at("mosaic_model_changes_total{change=\"remove\"}"), 2.0);
    QVERIFY(m.at("mosaic_model_change_bytes_total") > 0);
    // Each served over the runtime's memory (the streams kept their KV cache), copying only the
    // experts whose owner changed: some, and fewer than the 3 × 16 slots.
    QCOMPARE(m.at("mosaic_model_changes_in_place_total"), 3.0);
    QVERIFY(m.at("mosaic_model_change_expert_copies_total") > 0 && m.at("mosaic_model_change_expert_copies_total") < 3 * 3 * 16);
    QCOMPARE(s.terminate(30), 0);
  }

  // A server stopped before any request reached the engine records its run as "empty", which
  // reports leave out instead of averaging its zeros in.
  void aServerThatServedNothingRecordsAnEmptyRun() {
    const fs::path db = scratch("empty.sqlite");
    Server s({QStringLiteral("--db"), path(db)});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    QCOMPARE(ask(s.port(), http_request("POST", "/v1/completions", json{{"model", "no-such-model"}, {"prompt", "x"}}.dump())).status, 404);
    QCOMPARE(s.terminate(30), 0);
    std::string status;
    QVERIFY(recorded(db, &status).empty());
    QCOMPARE(status, std::string("empty"));
  }

  // bench-serve runs both paths on the same workload and reports each, with the overhead between.
  void benchServeComparesBothPaths() {
    const fs::path out = scratch("bench-serve.json");
    QStringList a{QStringLiteral("bench-serve"), QStringLiteral("--variants"), path(family / "base"), path(family / "bible")};
    a << args({"--capacity", "8", "--clients", "1", "3", "--min-requests", "4", "--per-client", "2", "--max-tokens", "5", "--reps", "1", "--json"})
      << path(out);
    const Run r = cli(a);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains(QStringLiteral("in-process tok/s  HTTP tok/s  overhead")), qPrintable(r.out));
    const json j = json::parse(std::ifstream(out));
    QCOMPARE(j["rows"].size(), std::size_t(2));
    QCOMPARE(j["rows"][1]["clients"].get<int>(), 3);
    QCOMPARE(j["rows"][1]["requests"].get<int>(), 6);
    for (const json& row : j["rows"]) {
      QVERIFY(row["in_process_tokens_per_second"].get<double>() > 0);
      QVERIFY(row["http_tokens_per_second"].get<double>() > 0);
      QVERIFY(row["http_ttft"]["p50"].get<double>() > 0 && row["in_process_ttft"]["p50"].get<double>() > 0);
      QCOMPARE(row["overhead"].get<double>(), 1 - row["http_tokens_per_second"].get<double>() / row["in_process_tokens_per_second"].get<double>());
    }
  }

  // SIGTERM while streams run: new requests are refused with Retry-After while running ones get the
  // grace period; those still running after it end with an error event. The process exits 0 and the
  // record holds every request as its client saw it end.
  void sigtermUnderLoad() {
    const fs::path db = scratch("drained.sqlite");
    Server s({QStringLiteral("--grace"), QStringLiteral("0.5"), QStringLiteral("--db"), path(db)});
    QVERIFY2(s.port() > 0, qPrintable(s.errors()));
    const int port = s.port();
    constexpr int clients = 24;
    std::vector<Response> answers(clients);
    std::vector<std::jthread> threads;
    for (int i = 0; i < clients; ++i)
      threads.emplace_back([&, i] {
        // Short ones finish inside the grace period; long ones do not.
        answers[i] = ask(port, http_request("POST", "/v1/completions", completion(models[i % models.size()], i % 2 ? 4 : 480, true, 1.0)));
      });
    // SIGTERM once every request is in (running or waiting for KV blocks).
    const auto before = metrics_when(port, [](const auto& m) {
      return m.at("mosaic_sequences_running") + m.at("mosaic_sequences_waiting") + static_cast<double>(requests_by_status(m)["ok"]) == clients;
    });
    const auto t0 = Clock::now();
    // Draining: /health says so and a new request is refused with Retry-After (or, if the drain is
    // already over, the connection is refused).
    s.signal_term();
    Response during;
    for (int tries = 0; tries < 200; ++tries) {
      const Response h = ask(port, http_request("GET", "/health"), 5);
      if (h.status != 200) {
        during = ask(port, http_request("POST", "/v1/completions", completion("bible", 4, false)), 5);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const int exit_code = s.wait_exit(30);
    const double drain = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& t : threads) t.join();
    QCOMPARE(exit_code, 0);
    QVERIFY2(during.status == 0 || refused(during), qPrintable(QString::number(during.status)));

    std::map<std::pair<std::string, std::string>, std::int64_t> seen;
    int cut = 0;
    for (int i = 0; i < clients; ++i) {
      const Response& r = answers[i];
      QCOMPARE(r.status, 200);
      const auto ev = r.events();
      QVERIFY(!ev.empty());
      QCOMPARE(ev.back(), std::string("[DONE]"));
      if (complete_stream(r)) {
        ++seen[{models[i % models.size()], "ok"}];
      } else {
        // Cut by the shutdown: the last event before [DONE] is an error saying so.
        QVERIFY(ev.size() >= 2);
        const json e = json::parse(ev[ev.size() - 2], nullptr, false);
        QVERIFY2(!e.is_discarded() && e.contains("error"), ev[ev.size() - 2].c_str());
        QVERIFY(e["error"]["message"].get<std::string>().find("shut") != std::string::npos);
        ++seen[{models[i % models.size()], "cancelled"}];
        ++cut;
      }
    }
    qInfo("SIGTERM with %d streams (%.0f running, %.0f waiting): %d finished, %d cut; exited after %.2f s", clients,
          before.at("mosaic_sequences_running"), before.at("mosaic_sequences_waiting"), clients - cut, cut, drain);
    QVERIFY2(drain < 0.5 + 10, "the drain outlasted its grace period by more than 10 s");
    std::string status;
    QCOMPARE(recorded(db, &status), seen);
    QCOMPARE(status, std::string("finished"));
    QCOMPARE(integrity_check(db), std::string("ok"));
  }
};

QTEST_GUILESS_MAIN(TestServeFaults)
#include "tst_serve_faults.moc"
