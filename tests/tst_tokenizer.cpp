// Tokenizer: GPT-2's split, hand-checked BPE encodings of both pipelines (byte-level, and Metaspace
// with byte fallback as Llama/Mixtral ship it), round trips of a tokenizer trained on real text, and
// typed errors for files Mosaic cannot read.
#include <QTemporaryDir>
#include <QTest>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "common/error.h"
#include "forge/bpe_trainer.h"
#include "model/byte_level.h"
#include "model/pre_tokenizer.h"
#include "model/text_stream.h"
#include "model/tokenizer.h"
#include "model/unicode_form.h"
#include "test_support.h"

using namespace mosaic;
using namespace mosaic::test;
using nlohmann::json;

namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> texts;
  for (const char* f : {"bible.txt", "fortunes.txt", "jargon.txt", "c-headers.txt"}) texts.push_back(read_text(data_dir() / "corpus" / f));
  return texts;
}

// Llama/Mixtral's pipeline in miniature: Prepend + Replace normalizer, BPE with byte fallback,
// a <s> template. Tokens: <unk> <s> </s>, the 256 byte tokens, then ▁ h e l o and five merges.
json metaspace_tokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  const std::vector<std::string> extra{"\u2581", "h", "e", "l", "o", "\u2581h", "ll", "\u2581he", "llo", "\u2581hello"};
  for (std::size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 259 + static_cast<int>(i);
  return {
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"model", {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
                 {"merges", {"\u2581 h", "l l", "\u2581h e", "ll o", "\u2581he llo"}}}}};
}

}  // namespace

class TokenizerTest : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void gpt2_split_follows_the_regex() {
    const auto words = split_gpt2("Hello world's  end\n\nok 123!!");
    const std::vector<std::string_view> expected{"Hello", " world", "'s", " ", " end", "\n", "\n", "ok", " 123", "!!"};
    QCOMPARE(words.size(), expected.size());
    for (std::size_t i = 0; i < words.size(); ++i) QCOMPARE(std::string(words[i]), std::string(expected[i]));
    const auto tail = split_gpt2("a  \t");  // trailing whitespace stays one word
    QCOMPARE(tail.size(), std::size_t(2));
    QCOMPARE(std::string(tail[1]), std::string("  \t"));
    // Unicode's classes, exactly: a currency sign is neither letter nor number, Arabic-Indic digits
    // are numbers (both read as letters before the split was PCRE2's), and a byte that is not UTF-8
    // stands alone between the matches around it.
    const auto unicode = split_gpt2("a\u20ac7 x\u0661\u0662 ok\xff!");
    const std::vector<std::string> pieces{"a", "\u20ac", "7", " x", "\u0661\u0662", " ok", "\xff", "!"};
    QCOMPARE(unicode.size(), pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i) QCOMPARE(std::string(unicode[i]), pieces[i]);
  }

  // Every released pre-tokenizer chain Mosaic reads, against HF tokenizers itself: the cases are
  // written by tests/node/tokenizer_cases.mjs with HF's Rust library (ctest's hf_tokenizer_cases,
  // into MOSAIC_HF_TOKENIZER_CASES), hand-picked and seeded random texts in many scripts, and must
  // come out id for id.
  void released_pre_tokenizers_match_hf_tokenizers() {
    const char* dir = std::getenv("MOSAIC_HF_TOKENIZER_CASES");
    if (!dir) QSKIP("MOSAIC_HF_TOKENIZER_CASES is not set: ctest runs this as tst_tokenizer_hf, after npm installs HF's tokenizers");
    int chains = 0;
    std::string differ;  // every chain's first difference, so one run shows them all
    for (const char* name : {"deepseek_v2", "deepseek_v3", "llama3", "qwen2", "starcoder", "gpt2", "gpt2_prefixed", "gpt2_nfkc", "behaviours"}) {
      // The chains that normalize first (as tokenizer_cases.mjs sets them): HF's pieces are of the normalized text.
      const std::string chain = name;
      const std::optional<UnicodeForm> form = chain == "qwen2" ? std::optional(UnicodeForm::NFC)
                                              : chain == "gpt2_nfkc" ? std::optional(UnicodeForm::NFKC) : std::nullopt;
      const fs::path cases_file = fs::path(dir) / (std::string(name) + ".cases.json");
      QVERIFY2(fs::exists(cases_file), cases_file.c_str());
      const Tokenizer tok = Tokenizer::load(fs::path(dir) / (std::string(name) + ".tokenizer.json"));
      const json cases = json::parse(read_text(cases_file));
      int wrong = 0;
      std::string first;
      for (const json& c : cases) {
        const std::string text = c.at("text");
        const std::vector<std::int64_t> want = c.at("ids").get<std::vector<std::int64_t>>();
        const std::vector<std::int64_t> got = tok.encode(text, /*add_special=*/false);
        if (got != want) {
          if (wrong++ == 0) first = "'" + text + "': HF " + json(want).dump() + ", Mosaic " + json(got).dump();
          continue;
        }
        if (c.at("words").is_null()) continue;  // the text holds an added token
        std::vector<std::string> pieces;
        for (const std::string& p : tok.pre_tokenizer()->split(form ? normalize(text, *form) : text)) pieces.push_back(to_byte_symbols(p));
        const std::vector<std::string> words = c.at("words").get<std::vector<std::string>>();
        if (pieces != words && wrong++ == 0) first = "'" + text + "' cut as HF " + json(words).dump() + ", Mosaic " + json(pieces).dump();
      }
      if (wrong) differ += "\n" + std::string(name) + ": " + std::to_string(wrong) + " of " + std::to_string(cases.size()) + " texts differ; first " + first;
      QVERIFY(cases.size() > 400);
      ++chains;
    }
    QVERIFY2(differ.empty(), differ.c_str());
    QCOMPARE(chains, 9);
  }

  void byte_level_encoding_is_hand_checked() {
    // No specials: byte b has id b; the merges get ids 256, 257, 258.
    const Tokenizer t = Tokenizer::byte_level({}, {{"\u0120", "t"}, {"h", "e"}, {"\u0120t", "he"}});
    QCOMPARE(t.vocab_size(), std::int64_t(259));
    // "the" → t|he (no merge joins t and he without the space); " theme" → Ġthe|m|e.
    const auto ids = t.encode("the theme");
    QCOMPARE(ids, (std::vector<std::int64_t>{'t', 257, 258, 'm', 'e'}));
    QCOMPARE(t.token(258), std::string("\u0120the"));
    QCOMPARE(t.decode(ids), std::string("the theme"));
    QCOMPARE(t.encode("\n"), (std::vector<std::int64_t>{'\n'}));
    QCOMPARE(t.token('\n'), std::string("\u010A"));  // Ċ, GPT-2's stand-in for a newline
    // An id past the vocabulary (a model's padded embedding rows) decodes to nothing, as in HF; looking
    // it up alone is still an error that names it.
    QCOMPARE(t.decode(std::vector<std::int64_t>{'t', 259, 257, -1, 4000}), std::string("the"));
  }

  void metaspace_with_byte_fallback_is_hand_checked() {
    const Tokenizer t = Tokenizer::parse(metaspace_tokenizer().dump(), "llama-like");
    QCOMPARE(t.kind(), Tokenizer::Kind::Metaspace);
    // "▁hello▁héllo": ▁hello; ▁h; é is no token, so its UTF-8 bytes C3 A9; llo. <s> first.
    const auto ids = t.encode("hello héllo");
    QCOMPARE(ids, (std::vector<std::int64_t>{1, 268, 264, 3 + 0xC3, 3 + 0xA9, 267}));
    QCOMPARE(t.decode(ids), std::string("hello héllo"));
    // As in HF, the leading-space strip applies to the start of the text only, here "<s>".
    QCOMPARE(t.decode(ids, /*keep_special=*/true), std::string("<s> hello héllo"));
    QCOMPARE(t.encode("hello", /*add_special=*/false), (std::vector<std::int64_t>{268}));
    // Added tokens are matched in the raw text; the text after one is prepended no "▁" of its own.
    QCOMPARE(t.encode("hello</s>", false), (std::vector<std::int64_t>{268, 2}));
  }

  void trained_tokenizer_round_trips_any_text() {
    const auto texts = corpus();
    std::vector<std::string_view> views(texts.begin(), texts.end());
    const Tokenizer t = train_byte_level_bpe(views, 700, {"<pad>", "<s>", "</s>"});
    QCOMPARE(t.vocab_size(), std::int64_t(700));
    QCOMPARE(*t.id("</s>"), std::int64_t(2));
    std::size_t bytes = 0, tokens = 0;
    for (const std::string& text : texts) {
      const auto ids = t.encode(text);
      QCOMPARE(t.decode(ids), text);
      bytes += text.size();
      tokens += ids.size();
    }
    // Trained on this very text, the merges must compress it well below one token per byte.
    QVERIFY2(tokens * 2 < bytes, (std::to_string(tokens) + " tokens for " + std::to_string(bytes) + " bytes").c_str());

    std::mt19937 rng(7);  // arbitrary bytes, invalid UTF-8 included, survive too
    for (int trial = 0; trial < 50; ++trial) {
      std::string s(static_cast<std::size_t>(rng() % 40), '\0');
      for (char& c : s) c = static_cast<char>(rng() % 256);
      QCOMPARE(t.decode(t.encode(s)), s);
    }
    QCOMPARE(t.decode(t.encode("In the beginning </s> was the Word")), std::string("In the beginning  was the Word"));

    // Written and read back as tokenizer.json, it encodes identically.
    QTemporaryDir dir;
    const fs::path path = fs::path(dir.path().toStdString()) / "tokenizer.json";
    t.save(path);
    const Tokenizer back = Tokenizer::load(path);
    QCOMPARE(back.encode(texts[0]), t.encode(texts[0]));
    const json doc = json::parse(read_text(path));
    QCOMPARE(doc["model"]["type"].get<std::string>(), std::string("BPE"));
    QCOMPARE(doc["pre_tokenizer"]["type"].get<std::string>(), std::string("ByteLevel"));
    QCOMPARE(doc["model"]["merges"].size(), std::size_t(700 - 3 - 256));
  }

  void unreadable_files_are_typed_errors() {
    json bad = metaspace_tokenizer();
    bad["model"]["merges"].push_back("x y");
    QVERIFY(error_of<FormatError>([&] { Tokenizer::parse(bad.dump(), "bad.json"); }).find("'xy', which is not in the vocabulary") != std::string::npos);
    json unigram = metaspace_tokenizer();
    unigram["model"]["type"] = "Unigram";
    QVERIFY(error_of<UnsupportedError>([&] { Tokenizer::parse(unigram.dump(), "u.json"); }).find("model.type") != std::string::npos);
    QVERIFY(error_of<FormatError>([&] { Tokenizer::parse("{\"model\": ", "cut.json"); }).find("cut.json") != std::string::npos);
    QVERIFY(error_of<IoError>([&] { Tokenizer::load("/nonexistent/tokenizer.json"); }).find("tokenizer.json") != std::string::npos);
    const Tokenizer t = Tokenizer::parse(metaspace_tokenizer().dump(), "llama-like");
    QVERIFY(error_of<InvalidArgument>([&] { t.token(9999); }).find("9999") != std::string::npos);
  }

  // Streamed text never splits a character: byte-fallback bytes of "é" come one token at a time,
  // and the character is handed out when its last byte arrives.
  void text_stream_keeps_characters_whole() {
    const Tokenizer t = Tokenizer::parse(metaspace_tokenizer().dump(), "llama-like");
    TextStream stream(t);
    std::vector<std::string> pieces;
    for (const std::int64_t id : t.encode("hello héllo", /*add_special=*/false)) pieces.push_back(stream.push(id));
    QCOMPARE(pieces, (std::vector<std::string>{"hello", " h", "", "\u00e9", "llo"}));
    // A stream that ends inside a character hands out its last bytes when finished.
    TextStream cut(t);
    for (const std::int64_t id : {268, 264, 3 + 0xC3}) cut.push(id);
    QCOMPARE(cut.finish(), std::string("\xC3"));
    QCOMPARE(cut.finish(), std::string());
  }

  // Streamed pieces, joined, are what one decode of every token gives, on random streams of both
  // kinds of tokenizer: specials, byte-fallback bytes that split characters (and never finish some),
  // lone "▁" tokens (the Metaspace decoder drops the space that starts the text), ids past the
  // vocabulary. The stream settles text as it goes and decodes only the rest again.
  void text_stream_hands_out_what_decode_gives() {
    const Tokenizer metaspace = Tokenizer::parse(metaspace_tokenizer().dump(), "llama-like");
    const Tokenizer byte_level = Tokenizer::byte_level({"<|end|>"}, {{"\u0120", "t"}, {"h", "e"}, {"\u0120t", "he"}});
    // "▁" then "▁hello": one space, not two and not none.
    TextStream spaces(metaspace);
    std::string joined = spaces.push(259);
    joined += spaces.push(268);
    QCOMPARE(joined + spaces.finish(), std::string(" hello"));
    std::mt19937_64 rng(7);
    for (const Tokenizer* t : {&metaspace, &byte_level})
      for (int trial = 0; trial < 200; ++trial) {
        std::uniform_int_distribution<std::int64_t> id(0, t->vocab_size() + 2);  // a few past the vocabulary
        std::vector<std::int64_t> ids(static_cast<std::size_t>(1 + trial % 60));
        for (auto& i : ids) i = trial % 3 == 0 && (rng() & 1) ? 259 : id(rng);  // lone "▁" often
        TextStream stream(*t);
        std::string pieces;
        for (std::int64_t i : ids) pieces += stream.push(i);
        pieces += stream.finish();
        QCOMPARE(pieces, t->decode(ids));
        QCOMPARE(stream.tokens(), ids);
      }
  }

  // Pipelines whose pieces do not fit together, or that Mosaic would silently read another way
  // than HF does, are refused naming the field.
  void mismatched_pipelines_are_refused() {
    struct Case { const char* name; std::function<void(json&)> edit; std::vector<std::string> mentions; bool unsupported; };
    const std::vector<Case> cases = {
        {"ByteLevel decoder after Metaspace", [](json& j) { j["decoder"] = {{"type", "ByteLevel"}}; },
         {"decoder.type", "'ByteLevel' does not undo the Metaspace"}, true},
        {"unknown decoder", [](json& j) { j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "WordPiece"}}}}}; },
         {"decoder.decoders[1].type", "'WordPiece' is not implemented"}, true},
        {"truncation of a second sequence", [](json& j) { j["truncation"] = {{"max_length", 512}, {"strategy", "OnlySecond"}}; },
         {"truncation.strategy", "OnlySecond"}, true},
        {"truncation without a length", [](json& j) { j["truncation"] = {{"direction", "Right"}}; }, {"truncation.max_length"}, false},
        {"duplicate vocab id", [](json& j) { j["model"]["vocab"]["\u2581hello"] = 262; }, {"has id 262", "too"}, false},
        {"vocab id 10^12", [](json& j) { j["model"]["vocab"]["o"] = 1000000000000; }, {"model.vocab[o]", "token id from 0"}, false},
        {"added id 10^9", [](json& j) { j["added_tokens"][2]["id"] = 1000000000; }, {"added_tokens", "'</s>' has id 1000000000"}, false},
        {"sparse ids", [](json& j) { j["model"]["vocab"]["o"] = 16000000; }, {"model.vocab", "ids up to 16000000"}, false},
        {"added id far past", [](json& j) { j["added_tokens"][2]["id"] = 5000000; }, {"added_tokens", "far past"}, false},
        {"lost merges", [](json& j) { j["model"]["merges"] = json::array(); }, {"model.merges", "is empty", "several characters"}, false},
        {"special id past the vocabulary", [](json& j) { j["post_processor"]["special_tokens"]["<s>"]["ids"] = {5000}; },
         {"post_processor.special_tokens", "5000"}, false},
    };
    for (const Case& c : cases) {
      json j = metaspace_tokenizer();
      c.edit(j);
      const std::string msg = c.unsupported ? error_of<UnsupportedError>([&] { Tokenizer::parse(j.dump(), "tok.json"); })
                                            : error_of<FormatError>([&] { Tokenizer::parse(j.dump(), "tok.json"); });
      QVERIFY2(msg.find("tok.json") != std::string::npos, (std::string(c.name) + ": " + msg).c_str());
      for (const auto& m : c.mentions) QVERIFY2(msg.find(m) != std::string::npos, (std::string(c.name) + ": " + msg).c_str());
    }
    // `truncation`, which transformers saves once a tokenizer was called with truncation=True, is
    // applied as HF applies it: the text's tokens cut, the template's <s> kept, within max_length.
    json cut = metaspace_tokenizer();
    cut["truncation"] = {{"max_length", 3}, {"direction", "Right"}, {"strategy", "LongestFirst"}, {"stride", 0}};
    QCOMPARE(Tokenizer::parse(cut.dump(), "cut").encode("hello héllo"), (std::vector<std::int64_t>{1, 268, 264}));
    QCOMPARE(Tokenizer::parse(cut.dump(), "cut").encode("hello héllo", false), (std::vector<std::int64_t>{268, 264, 3 + 0xC3}));
    cut["truncation"]["direction"] = "Left";
    QCOMPARE(Tokenizer::parse(cut.dump(), "cut").encode("hello héllo"), (std::vector<std::int64_t>{1, 3 + 0xA9, 267}));
    // What Llama/Mixtral ship is accepted: their decoder undoes Metaspace with byte fallback.
    json llama = metaspace_tokenizer();
    llama["decoder"] = {{"type", "Sequence"},
                        {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                      {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    llama["truncation"] = nullptr;
    QCOMPARE(Tokenizer::parse(llama.dump(), "llama").decode(std::vector<std::int64_t>{268}), std::string("hello"));
  }

  // A chain Mosaic cannot run as HF does is refused, naming the step; a bad pattern or behaviour is
  // a format error naming the field.
  void pre_tokenizer_chains_are_checked() {
    const json split = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}+"}}}, {"behavior", "Isolated"}, {"invert", false}};
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    auto with = [](json pre) {
      json j = json::parse(Tokenizer::byte_level({"<|end|>"}, {}).to_json());
      j["pre_tokenizer"] = std::move(pre);
      return j.dump();
    };
    auto seq = [](std::vector<json> steps) { return json{{"type", "Sequence"}, {"pretokenizers", steps}}; };
    struct Case { const char* name; json pre; std::vector<std::string> mentions; bool unsupported; };
    json bad_regex = split, bad_behavior = split, no_pattern = split;
    bad_regex["pattern"]["Regex"] = "[a-";
    bad_behavior["behavior"] = "Sideways";
    no_pattern.erase("pattern");
    const std::vector<Case> cases = {
        {"a chain without ByteLevel", seq({split}), {"pre_tokenizer.pretokenizers[0].type", "ends the chain"}, true},
        {"ByteLevel before a Split", seq({byte_level, split}), {"pre_tokenizer.pretokenizers[0]", "ByteLevel before"}, true},
        {"a step not implemented", seq({{{"type", "Punctuation"}, {"behavior", "Isolated"}}, byte_level}),
         {"pre_tokenizer.pretokenizers[0].type", "'Punctuation' is not implemented"}, true},
        {"a pattern that does not compile", seq({bad_regex, byte_level}), {"pre_tokenizer.pretokenizers[0].pattern", "regular expression"}, false},
        {"an unknown behaviour", seq({bad_behavior, byte_level}), {"pre_tokenizer.pretokenizers[0].behavior", "Sideways"}, false},
        {"a Split without a pattern", seq({no_pattern, byte_level}), {"pre_tokenizer.pretokenizers[0].pattern"}, false},
        {"an empty Sequence", seq({}), {"pre_tokenizer.pretokenizers"}, false},
    };
    for (const Case& c : cases) {
      const std::string msg = c.unsupported ? error_of<UnsupportedError>([&] { Tokenizer::parse(with(c.pre), "tok.json"); })
                                            : error_of<FormatError>([&] { Tokenizer::parse(with(c.pre), "tok.json"); });
      QVERIFY2(msg.find("tok.json") != std::string::npos, (std::string(c.name) + ": " + msg).c_str());
      for (const auto& m : c.mentions) QVERIFY2(msg.find(m) != std::string::npos, (std::string(c.name) + ": " + msg).c_str());
    }
    // Text that is not UTF-8 is encoded whole, its bad bytes never inside a match, as before.
    const Tokenizer t = Tokenizer::parse(with(seq({split, byte_level})), "tok.json");
    const std::string bad = std::string("ab\xff" "12\xc3") + "3";
    std::string back;
    for (const std::string& piece : t.pre_tokenizer()->split(bad)) back += piece;
    QCOMPARE(back, bad);
    QCOMPARE(t.decode(t.encode(bad, false)), bad);
  }

  // A probe's crash: a post_processor of 100k nested Sequences overflowed the stack in Mosaic's own
  // walk. The parser refuses the depth before any walk; a FIFO is refused before it is opened.
  void endless_nesting_and_fifos_are_refused() {
    json outer = metaspace_tokenizer();
    outer.erase("post_processor");
    std::string nested = outer.dump();
    nested.pop_back();  // the closing brace: a post_processor is added in its place
    for (int i = 0; i < 100000; ++i) nested += i ? "{\"type\": \"Sequence\", \"processors\": [" : ", \"post_processor\": {\"type\": \"Sequence\", \"processors\": [";
    for (int i = 0; i < 100000; ++i) nested += "]}";
    nested += "}";
    expect_mentions(error_of<FormatError>([&] { Tokenizer::parse(nested, "deep.json"); }), {"deep.json", "deeper than"});
    QTemporaryDir dir;
    const std::filesystem::path fifo = std::filesystem::path(dir.path().toStdString()) / "tokenizer.json";
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    expect_mentions(error_of<IoError>([&] { Tokenizer::load(fifo); }), {"tokenizer.json", "not a regular file"});
  }
};

QTEST_APPLESS_MAIN(TokenizerTest)
#include "tst_tokenizer.moc"
