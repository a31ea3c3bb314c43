// Chat templates (tokenizer_config.json's Jinja) rendered as transformers renders them: every
// template in tests/data/chat_templates with every conversation in cases.json against what Jinja
// itself wrote (expected.json, from make_expected.py), templates read from a model's folder, and
// templates that are malformed or never end refused with the line and the reason.
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <fstream>

#include "common/error.h"
#include "model/chat_template.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;
using nlohmann::ordered_json;

namespace {

const fs::path templates = data_dir() / "chat_templates";

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace

class ChatTemplateTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void every_template_renders_as_jinja_does() {
    const auto expected = ordered_json::parse(read_text(templates / "expected.json"));
    const auto cases = ordered_json::parse(read_text(templates / "cases.json"));
    int compared = 0;
    for (const auto& entry : fs::directory_iterator(templates)) {
      if (entry.path().extension() != ".jinja") continue;
      const std::string name = entry.path().stem().string();
      QVERIFY2(expected.contains(name), qPrintable(QString::fromStdString(name + " has no expected output: run make_expected.py")));
      const ChatTemplate t = ChatTemplate::parse(read_text(entry.path()), entry.path().string(), "<s>", "</s>");
      for (auto it = cases.begin(); it != cases.end(); ++it) {
        const ordered_json& want = expected[name][it.key()];
        const std::string where = name + " / " + it.key();
        if (want.contains("text")) {
          std::string got;
          try {
            got = t.render_with(it.value());
          } catch (const std::exception& e) {
            QFAIL(qPrintable(QString::fromStdString(where + ": " + e.what())));
          }
          QVERIFY2(got == want["text"].get<std::string>(),
                   qPrintable(QString::fromStdString(where + ":\n--- jinja2\n" + want["text"].get<std::string>() + "\n--- mosaic\n" + got)));
        } else if (want.contains("raised_by")) {  // Python failed on the values (a list added to a string)
          QVERIFY2(error_of<Error>([&] { t.render_with(it.value()); }).find("<") != 0, qPrintable(QString::fromStdString(where)));
        } else {  // the template's raise_exception: its own words reach the user
          expect_mentions(error_of<InvalidArgument>([&] { t.render_with(it.value()); }), {want["error"].get<std::string>()});
        }
        ++compared;
      }
    }
    QVERIFY(compared >= 25);
  }

  void a_models_folder_brings_its_template_and_special_tokens() {
    QTemporaryDir dir;
    const fs::path d = dir.path().toStdString();
    QVERIFY(!ChatTemplate::load(d));  // no tokenizer_config.json: the plain format serves
    write(d / "tokenizer_config.json", R"({"model_max_length": 4096})");
    QVERIFY(!ChatTemplate::load(d));  // a config without a template
    // Special tokens as transformers writes them: strings, or AddedToken objects.
    write(d / "tokenizer_config.json", R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
        "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"})");
    const auto t = ChatTemplate::load(d);
    QVERIFY(t.has_value());
    const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    QCOMPARE(t->render(messages, true), std::string("<s>[user] hi</s>[assistant] "));
    QCOMPARE(t->render(messages, false), std::string("<s>[user] hi</s>"));
    // Named templates: chat uses the one named "default".
    write(d / "tokenizer_config.json",
          R"({"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "{{ messages[0].content }}"}]})");
    QCOMPARE(ChatTemplate::load(d)->render(messages, true), std::string("hi"));
    // What cannot be a template is refused, naming the file.
    write(d / "tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
    expect_mentions(error_of<FormatError>([&] { ChatTemplate::load(d); }), {"tokenizer_config.json", "default"});
    write(d / "tokenizer_config.json", R"({"chat_template": 7})");
    expect_mentions(error_of<FormatError>([&] { ChatTemplate::load(d); }), {"tokenizer_config.json", "chat_template"});
    write(d / "tokenizer_config.json", R"({"chat_template": "{% for m in messages %}"})");
    expect_mentions(error_of<FormatError>([&] { ChatTemplate::load(d); }), {"tokenizer_config.json", "line 1", "endfor"});
    write(d / "tokenizer_config.json", "{\"chat_template\": ");
    expect_mentions(error_of<FormatError>([&] { ChatTemplate::load(d); }), {"tokenizer_config.json", "JSON"});
  }

  void malformed_templates_are_refused_with_the_line() {
    const auto parse_error = [](const std::string& text) { return error_of<FormatError>([&] { ChatTemplate::parse(text, "t.jinja"); }); };
    expect_mentions(parse_error("ok\n{{ messages"), {"t.jinja", "line 2", "never closed"});
    expect_mentions(parse_error("{% if x %}a{% endfor %}"), {"line 1", "'{% endfor %}'"});
    expect_mentions(parse_error("a\nb\n{% include 'other.jinja' %}"), {"line 3", "include"});
    expect_mentions(parse_error("{% for m in messages %}"), {"endfor"});
    expect_mentions(parse_error("{{ 1 $ 2 }}"), {"unexpected character '$'"});
    expect_mentions(parse_error("{{ 'open }}"), {"never closed"});
    expect_mentions(parse_error("{{ a b }}"), {"unexpected 'b'"});
    expect_mentions(parse_error("{% set %}"), {"expected a name"});
    expect_mentions(parse_error("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"), {"nested deeper than 64"});
    expect_mentions(parse_error("{{ 99999999999999999999 }}"), {"out of range"});
  }

  // What transformers gives every template, and Jinja's answers where they differ from Python's.
  void globals_and_jinja_corners() {
    const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    const auto render = [&](const std::string& text) { return ChatTemplate::parse(text, "t.jinja").render(messages, true); };
    QCOMPARE(render("{% if strftime_now is defined %}dated{% endif %}|{% if raise_exception is undefined %}no{% endif %}"), std::string("dated|"));
    QCOMPARE(render("{{ tools is none }} {{ documents is none }}"), std::string("True True"));
    QCOMPARE(render("{{ 'a' in nothing }}"), std::string("False"));
    QCOMPARE(render("[{{ '' * 9999999999999 }}][{{ 'ab' * -3 }}][{{ 'ab' * 2 }}]"), std::string("[][][abab]"));
    QCOMPARE(render("a\r\n{% if true %}\r\nb{% endif %}\r\n"), std::string("a\nb"));  // line endings read as \n
  }

  void templates_that_fail_or_never_end_are_stopped() {
    const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
    const auto render_error = [&](const std::string& text) {
      return error_of<InvalidArgument>([&] { ChatTemplate::parse(text, "t.jinja").render(messages, true); });
    };
    expect_mentions(render_error("{{ messages | shuffle }}"), {"t.jinja", "line 1", "shuffle"});
    expect_mentions(render_error("\n{{ messages[0].content.nope() }}"), {"line 2", "nope"});
    expect_mentions(render_error("{{ missing.attribute }}"), {"undefined"});
    expect_mentions(render_error("{{ 'a' + 1 }}"), {"cannot apply '+'"});
    expect_mentions(render_error("{{ 1 // 0 }}"), {"division by zero"});
    expect_mentions(render_error("{% for a, b in messages %}{% endfor %}"), {"unpack"});
    expect_mentions(render_error("{% set x = 1 %}{% set x.y = 2 %}"), {"namespace"});
    expect_mentions(render_error("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}"), {"a million steps"});
    expect_mentions(render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"), {"32 deep"});
    expect_mentions(render_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"), {"16 MiB"});
    expect_mentions(render_error("{{ 'x' * 100000000 }}"), {"16 MiB"});
    expect_mentions(render_error("{{ range(10000000) | length }}"), {"million"});
    expect_mentions(render_error("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"), {"4096 lists"});
    expect_mentions(error_of<FormatError>([] { ChatTemplate::parse("{{ a" + std::string(3000, '+') + " }}", "t.jinja"); }), {"t.jinja"});
    std::string chain = "{{ a";
    for (int i = 0; i < 300; ++i) chain += " ~ a";
    expect_mentions(error_of<FormatError>([&] { ChatTemplate::parse(chain + " }}", "t.jinja"); }), {"deeper than 128"});
    expect_mentions(render_error("{{ 9223372036854775807 + 1 }}"), {"integer overflow"});
    expect_mentions(render_error("{{ -(-9223372036854775807 - 1) }}"), {"integer overflow"});
  }
};

QTEST_APPLESS_MAIN(ChatTemplateTest)
#include "tst_chat_template.moc"
