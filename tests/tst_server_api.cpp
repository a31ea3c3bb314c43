// The OpenAI API's bodies apart from the transport: what a request body becomes, how it is refused,
// and stop strings cut across streamed pieces.
#include <QTest>

#include <nlohmann/json.hpp>

#include "server/openai_api.h"
#include "server/request_framing.h"
#include "server/server_metrics.h"
#include "server/stop_text.h"

using namespace mosaic;
using namespace mosaic::server;

namespace {
ApiError refusal(const std::string& body, bool chat = false) {
  try {
    parse_request(body, chat);
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "", "accepted");
}
}  // namespace

class ServerApiTest : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void requests_are_read() {
    const ApiRequest c = parse_request(R"({"model": "bible", "prompt": "In the", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
                                           "seed": 3, "stop": ["\n", "."], "stream": true, "stream_options": {"include_usage": true},
                                           "frequency_penalty": 0, "user": "x"})",
                                       false);
    QCOMPARE(c.model, std::string("bible"));
    QCOMPARE(c.prompt_text, std::string("In the"));
    QCOMPARE(*c.max_tokens, std::int64_t(7));
    QCOMPARE(c.sampling.temperature, 0.5);
    QCOMPARE(c.sampling.seed, std::uint64_t(3));
    QCOMPARE(c.stop.size(), std::size_t(2));
    QVERIFY(c.stream && c.include_usage);
    QVERIFY(!c.ignore_eos);
    QVERIFY(parse_request(R"({"model": "m", "prompt": "x", "ignore_eos": true})", false).ignore_eos);
    QCOMPARE(parse_request(R"({"model": "m", "prompt": [5, 6, 7]})", false).prompt_ids, (std::vector<std::int64_t>{5, 6, 7}));
    const ApiRequest chat = parse_request(R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]}],
                                              "max_completion_tokens": 4})",
                                          true);
    QCOMPARE(chat.prompt_text, std::string("system: Be brief.\nuser: Hi!\nassistant:"));
    QCOMPARE(*chat.max_tokens, std::int64_t(4));
  }

  // OpenAI's defaults: temperature 1, and a request naming no seed draws anew (a newcomer's calls
  // at T = 1 without a seed had all returned the same text); a seed given repeats.
  void defaults_are_openais() {
    const char* body = R"({"model": "m", "prompt": "x"})";
    const ApiRequest a = parse_request(body, false), b = parse_request(body, false);
    QCOMPARE(a.sampling.temperature, 1.0);
    QCOMPARE(a.sampling.top_p, 1.0);
    QVERIFY(a.sampling.seed != b.sampling.seed);
    QCOMPARE(parse_request(R"({"model": "m", "prompt": "x", "seed": 9})", false).sampling.seed, std::uint64_t(9));
    // What does nothing is accepted as OpenAI's clients send it.
    for (const char* quiet : {R"({"model": "m", "prompt": "x", "logprobs": null, "echo": false, "suffix": "", "best_of": 1, "logit_bias": {},
                                  "presence_penalty": 0, "frequency_penalty": 0.0, "user": "u"})"}) {
      QVERIFY(parse_request(quiet, false).model == "m");
    }
    QVERIFY(parse_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": false, "top_logprobs": 0, "tools": [], "functions": [], "tool_choice": "auto", "function_call": "none",
                              "response_format": {"type": "text"}})",
                          true)
                .model == "m");
  }

  void bad_requests_name_the_parameter_data() {
    QTest::addColumn<QString>("body");
    QTest::addColumn<bool>("chat");
    QTest::addColumn<QString>("param");
    QTest::newRow("not json") << "{\"model\": " << false << "";
    QTest::newRow("not an object") << "[1]" << false << "";
    QTest::newRow("no model") << R"({"prompt": "x"})" << false << "model";
    QTest::newRow("no prompt") << R"({"model": "m"})" << false << "prompt";
    QTest::newRow("empty prompt") << R"({"model": "m", "prompt": ""})" << false << "prompt";
    QTest::newRow("two prompts") << R"({"model": "m", "prompt": ["a", "b"]})" << false << "prompt";
    QTest::newRow("negative id") << R"({"model": "m", "prompt": [1, -2]})" << false << "prompt";
    QTest::newRow("hot") << R"({"model": "m", "prompt": "x", "temperature": 2.5})" << false << "temperature";
    QTest::newRow("top_p 0") << R"({"model": "m", "prompt": "x", "top_p": 0})" << false << "top_p";
    QTest::newRow("max_tokens 0") << R"({"model": "m", "prompt": "x", "max_tokens": 0})" << false << "max_tokens";
    QTest::newRow("max_tokens text") << R"({"model": "m", "prompt": "x", "max_tokens": "9"})" << false << "max_tokens";
    QTest::newRow("n 3") << R"({"model": "m", "prompt": "x", "n": 3})" << false << "n";
    QTest::newRow("five stops") << R"({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})" << false << "stop";
    QTest::newRow("empty stop") << R"({"model": "m", "prompt": "x", "stop": ""})" << false << "stop";
    QTest::newRow("stream text") << R"({"model": "m", "prompt": "x", "stream": "yes"})" << false << "stream";
    QTest::newRow("ignore_eos 1") << R"({"model": "m", "prompt": "x", "ignore_eos": 1})" << false << "ignore_eos";
    QTest::newRow("no messages") << R"({"model": "m"})" << true << "messages";
    QTest::newRow("role missing") << R"({"model": "m", "messages": [{"content": "x"}]})" << true << "messages[0].role";
    QTest::newRow("an image") << R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})" << true
                              << "messages[0].content";
    // OpenAI parameters not served are refused, not ignored: the client would get something else.
    QTest::newRow("logprobs") << R"({"model": "m", "prompt": "x", "logprobs": 2})" << false << "logprobs";
    QTest::newRow("echo") << R"({"model": "m", "prompt": "x", "echo": true})" << false << "echo";
    QTest::newRow("suffix") << R"({"model": "m", "prompt": "x", "suffix": "tail"})" << false << "suffix";
    QTest::newRow("best_of") << R"({"model": "m", "prompt": "x", "best_of": 2})" << false << "best_of";
    QTest::newRow("presence_penalty") << R"({"model": "m", "prompt": "x", "presence_penalty": 0.5})" << false << "presence_penalty";
    QTest::newRow("frequency_penalty") << R"({"model": "m", "prompt": "x", "frequency_penalty": -1})" << false << "frequency_penalty";
    QTest::newRow("logit_bias") << R"({"model": "m", "prompt": "x", "logit_bias": {"5": 100}})" << false << "logit_bias";
    QTest::newRow("chat logprobs") << R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 2})" << true
                                   << "logprobs";
    QTest::newRow("tools") << R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})" << true << "tools";
    QTest::newRow("format of no type") << R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": 5}})" << true
                                       << "response_format";
    QTest::newRow("a tool chosen") << R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}})" << true
                                   << "tool_choice";
    QTest::newRow("json mode") << R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"
                               << true << "response_format";
    QTest::newRow("too deep") << QString::fromStdString(std::string(200, '[') + std::string(200, ']')) << false << "";
  }
  void bad_requests_name_the_parameter() {
    QFETCH(QString, body);
    QFETCH(bool, chat);
    QFETCH(QString, param);
    const ApiError e = refusal(body.toStdString(), chat);
    QCOMPARE(e.status, 400);
    QCOMPARE(QString::fromStdString(e.param), param);
    // OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
    const nlohmann::json j = error_body(e);
    QVERIFY(j["error"]["type"] == "invalid_request_error");
    QVERIFY(j["error"]["message"].is_string() && !j["error"]["message"].get<std::string>().empty());
    QCOMPARE(j["error"]["param"].is_null(), param.isEmpty());
  }

  // A stop string split across pieces is still found; text that may begin one is held back.
  // A byte token the model sampled alone, or a client's bytes quoted in an error, is not UTF-8: the
  // body still goes out, with U+FFFD in its place (nlohmann's default dump would throw).
  void invalid_utf8_goes_out_replaced() {
    const std::string stray = "caf\xc3 \xb3 ok";
    QCOMPARE(wire(nlohmann::json{{"text", stray}}), std::string("{\"text\":\"caf\xef\xbf\xbd \xef\xbf\xbd ok\"}"));
    try {
      parse_request("{\"model\": \"m\", \"prompt\": \"x\", \"stream\": fa\xb3lse}", false);
      QFAIL("malformed JSON was accepted");
    } catch (const ApiError& e) {
      const nlohmann::json back = nlohmann::json::parse(wire(error_body(e)));
      QCOMPARE(back["error"]["type"].get<std::string>(), std::string("invalid_request_error"));
    }
  }

  // The events a stream sends after its first are written from a precomputed frame: byte for byte
  // what the chunk itself gives, for completions and chat, whatever the text holds.
  void text_events_are_the_chunks_themselves() {
    for (const bool chat : {false, true}) {
      const ApiRequest r = parse_request(chat ? R"({"model": "bible", "messages": [{"role": "user", "content": "hi"}], "stream": true})"
                                              : R"({"model": "bible", "prompt": "hi", "stream": true})",
                                         chat);
      const TextEvents events(r, "cmpl-7", 1700000000);
      for (const std::string& text : {std::string("a"), std::string(" the \"LORD\"\n"), std::string("\xff\xfe bytes"), std::string("\x01text\x01"), std::string("é✓")}) {
        const std::string want = "data: " + wire(stream_chunk(r, "cmpl-7", 1700000000, text, std::nullopt, false)) + "\n\n";
        QCOMPARE(events.event(text), want);
      }
    }
  }

  void stop_strings_cut_across_pieces() {
    StopText s({"END", "\n\n"});
    QCOMPARE(s.push("Hello E"), std::string("Hello "));
    QCOMPARE(s.push("N"), std::string());
    QCOMPARE(s.push("ough"), std::string("ENough"));
    QCOMPARE(s.push(" and E"), std::string(" and "));
    QCOMPARE(s.push("ND more"), std::string());
    QVERIFY(s.stopped());
    QCOMPARE(s.push("later"), std::string());
    QCOMPARE(s.finish(), std::string());
    StopText t({"\n\n"});
    QCOMPARE(t.push("a\n"), std::string("a"));
    QCOMPARE(t.finish(), std::string("\n"));  // the generation ended: what was held back is handed out
    StopText none({});
    QCOMPARE(none.push("anything"), std::string("anything"));
    // The string completed first ends the text, however it arrives: "bc" is complete before "abcdef"
    // could be (the engine stops there), whether the text comes a byte at a time or whole.
    for (const std::size_t cut : {1, 2, 3, 6}) {
      StopText o({"abcdef", "bc"});
      std::string shown;
      for (std::size_t at = 0; at < 6 && !o.stopped(); at += cut) shown += o.push(std::string("abcdef").substr(at, cut));
      QVERIFY(o.stopped());
      QCOMPARE(shown, std::string("a"));
    }
    // Completed by the same character, the longer string counts.
    StopText same({"c", "abc"});
    QCOMPARE(same.push("xabcd"), std::string("x"));
  }

  // Where a request ends in what a connection sent: whole only once every byte of it has come,
  // whatever follows; refused with the status to answer when it can never be framed.
  void requests_are_framed() {
    using S = Framed::State;
    const FramingLimits lim{.max_head = 256, .max_body = 64};
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const std::string post = "POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
    const std::string chunked = "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nT: 1\r\n\r\n";
    for (const std::string& r : {get, post, chunked}) {
      const Framed whole = frame_request(r + get, lim);  // a pipelined request after it changes nothing
      QCOMPARE(whole.state, S::Complete);
      QCOMPARE(whole.bytes, r.size());
      for (std::size_t cut = 0; cut < r.size(); ++cut) QCOMPARE(frame_request(r.substr(0, cut), lim).state, S::Incomplete);
    }
    const Framed blank = frame_request("\r\n\r\n" + get, lim);  // blank lines before it are skipped
    QCOMPARE(blank.state, S::Complete);
    QCOMPARE(blank.skip, std::size_t(4));
    QCOMPARE(blank.target, std::string("/health"));
    const std::string expect = "POST /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    const Framed waiting = frame_request(expect, lim);
    QCOMPARE(waiting.state, S::Incomplete);
    QVERIFY(waiting.head_whole && waiting.expect_continue);
    QCOMPARE(expect.substr(waiting.expect_at, waiting.expect_bytes), std::string("Expect: 100-continue\r\n"));
    auto status = [&](const std::string& r) {
      const Framed f = frame_request(r, lim);
      return f.state == S::Refused ? f.status : 0;
    };
    QCOMPARE(status("POST /x HTTP/1.1\r\nContent-Length: 65\r\n\r\n"), 413);
    QCOMPARE(status("POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"), 413);
    QCOMPARE(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n"), 413);
    QCOMPARE(status("GET /x HTTP/1.1\r\nX: " + std::string(300, 'a')), 431);
    QCOMPARE(status("POST /x HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);  // smuggling
    QCOMPARE(status("POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n"), 400);
    QCOMPARE(status("POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
    QCOMPARE(status("POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
    QCOMPARE(status("GET /x HTTP/1.1\r\nX: a\r\n folded\r\n\r\n"), 400);
    QCOMPARE(status("GET /x HTTP/1.1\r\nX : a\r\n\r\n"), 400);
    QCOMPARE(status("GET /x HTTP/2.0\r\n\r\n"), 400);
    QCOMPARE(status("GET /x y HTTP/1.1\r\n\r\n"), 400);
    QCOMPARE(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
    QCOMPARE(status("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n"), 400);
  }

  void metrics_are_prometheus_text() {
    ServerMetrics m;
    RequestStats s;
    s.arrival = 0, s.first_token = 0.02, s.finish = 0.1, s.generated_tokens = 5, s.prompt_tokens = 3;
    s.counters.layers.resize(2);
    s.counters.layers[1].hits = 3, s.counters.layers[1].misses = 1;
    s.counters.layers[1].prefetches = 2, s.counters.layers[1].prefetch_used = 1;
    m.finished("bible", "ok", s);
    m.rejected("nope", "invalid");
    const std::string t = m.text();
    for (const char* line : {"mosaic_requests_total{model=\"bible\",status=\"ok\"} 1", "mosaic_requests_total{model=\"nope\",status=\"invalid\"} 1",
                             "mosaic_ttft_seconds_bucket{le=\"0.025\"} 1", "mosaic_ttft_seconds_bucket{le=\"0.01\"} 0",
                             "mosaic_ttft_seconds_count 1", "mosaic_tpot_seconds_sum 0.02", "mosaic_expert_hit_rate{layer=\"1\"} 0.75",
                             "mosaic_generated_tokens_total 5", "mosaic_expert_prefetches_total 2", "mosaic_expert_prefetches_used_total 1",
                             "# TYPE mosaic_ttft_seconds histogram"})
      QVERIFY2(t.find(line) != std::string::npos, line);
    QCOMPARE(m.requests("ok"), std::int64_t(1));
  }
};

QTEST_APPLESS_MAIN(ServerApiTest)
#include "tst_server_api.moc"
