#include "model/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json_int.h"
#include "common/json_text.h"
#include "common/text_file.h"
#include "model/bpe.h"
#include "model/byte_level.h"
#include "model/pre_tokenizer.h"
#include "model/unicode_form.h"
#include "model/utf8.h"

namespace mosaic {

using nlohmann::json;

namespace {
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"
// The largest token id read: the same bound as a config's vocab_size, far above any real vocabulary.
constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 24) - 1;
// How far ids may run past the tokens a file lists (reserved, unused ids): generous, yet bounded.
constexpr std::int64_t kIdSlack = 65536;
}

struct Tokenizer::Impl {
  Kind kind = Kind::ByteLevel;
  std::vector<std::string> tokens;                        // by id
  std::unordered_map<std::string, std::int64_t> ids;      // token → id
  BpeMerges merges;
  struct Added { std::string content; std::int64_t id; bool special; };
  std::vector<Added> added;                               // longest content first
  std::vector<bool> is_special;                           // by id
  std::vector<bool> is_added;                             // by id: an added token, special or not
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::optional<std::int64_t> unk;
  std::optional<UnicodeForm> form;                        // an NFC or NFKC normalizer (Qwen's NFC)
  // ByteLevel: the pre-tokenizer's chain (ByteLevel alone, or Split/Digits steps before it).
  std::optional<PreTokenizer> pre;
  // Metaspace: where "▁" is prepended, and whether words split before each "▁".
  enum class Prepend { Never, First, Always } prepend = Prepend::First;
  bool split = false;
  std::vector<std::int64_t> bos, eos;                     // the post-processor's single template
  // `truncation`, as HF applies it to one sequence: the text's tokens are cut so that with the
  // template's special tokens the total stays within max_length, from the end or the start.
  struct Truncation {
    std::int64_t max_length = 0;
    bool from_left = false;
  };
  std::optional<Truncation> truncation;
  std::string json_text;                                  // the file as read, or as built

  std::int64_t lookup(const std::string& t) const {
    const auto it = ids.find(t);
    return it == ids.end() ? -1 : it->second;
  }
  void encode_segment(std::string_view text, bool first, std::vector<std::int64_t>& out) const;
  void emit_symbols(const std::vector<std::string>& symbols, std::vector<std::int64_t>& out) const;
};

namespace {

[[noreturn]] void unsupported(const std::string& source, const std::string& field, const std::string& what) {
  throw UnsupportedError(source, field, what,
                         "Mosaic reads byte-level BPE (GPT-2, DeepSeek, Llama 3, Qwen) and Metaspace BPE (Llama 2, Mixtral) tokenizers");
}

std::string type_of(const json& j) { return j.is_object() ? j.value("type", std::string()) : std::string(); }

void read_model(Tokenizer::Impl& t, const json& m, const std::string& source) {
  if (!m.is_object()) throw MissingError(source, "model", "is absent");
  if (type_of(m) != "BPE") unsupported(source, "model.type", "'" + type_of(m) + "' is not BPE");
  for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(f) && !m[f].is_null() && !(m[f].is_string() && m[f].get<std::string>().empty()))
      unsupported(source, std::string("model.") + f, "is set");
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
    unsupported(source, "model.dropout", "BPE dropout is for training only");
  const json& vocab = m.at("vocab");
  if (!vocab.is_object()) throw FormatError(source, "model.vocab", "is not an object of token → id");
  std::int64_t max_id = -1;
  for (const auto& [tok, id] : vocab.items()) {
    if (!json_int_in(id, 0, kMaxTokenId))
      throw FormatError(source, "model.vocab[" + tok + "]", "is not a token id from 0 to " + std::to_string(kMaxTokenId));
    t.ids[tok] = id.get<std::int64_t>();
    max_id = std::max(max_id, id.get<std::int64_t>());
  }
  // Ids index a table: a vocabulary whose ids leave most of it empty is not one (and would cost
  // 32 bytes per empty id, 0.5 GB at 2^24).
  const auto entries = static_cast<std::int64_t>(vocab.size());
  if (max_id >= 2 * entries + kIdSlack)
    throw FormatError(source, "model.vocab", "has ids up to " + std::to_string(max_id) + " for " + std::to_string(entries) + " tokens",
                      "token ids run from 0 without large gaps; take tokenizer.json from the checkpoint again");
  t.tokens.assign(static_cast<std::size_t>(max_id + 1), std::string());
  std::vector<bool> taken(t.tokens.size(), false);
  for (const auto& [tok, id] : t.ids) {
    const auto i = static_cast<std::size_t>(id);
    // Two tokens with one id decode as whichever came last: the file is broken.
    if (taken[i]) throw FormatError(source, "model.vocab[" + tok + "]", "has id " + std::to_string(id) + ", which '" + t.tokens[i] + "' has too");
    taken[i] = true;
    t.tokens[i] = tok;
  }
  const json& merges = m.value("merges", json::array());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    std::string a, b;
    if (merges[i].is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string s = merges[i];
      const auto sp = s.find(' ');
      if (sp == std::string::npos) throw FormatError(source, "model.merges[" + std::to_string(i) + "]", "has no space between its two tokens");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (merges[i].is_array() && merges[i].size() == 2) {  // ["a", "b"]
      a = merges[i][0];
      b = merges[i][1];
    } else {
      throw FormatError(source, "model.merges[" + std::to_string(i) + "]", "is neither \"a b\" nor [\"a\", \"b\"]");
    }
    if (!t.ids.count(a + b))
      throw FormatError(source, "model.merges[" + std::to_string(i) + "]", "merges into '" + a + b + "', which is not in the vocabulary");
    t.merges.add(a, b);
  }
  t.byte_fallback = m.value("byte_fallback", false);
  t.fuse_unk = m.value("fuse_unk", false);
  t.ignore_merges = m.value("ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    const std::int64_t u = t.lookup(m["unk_token"]);
    if (u < 0) throw FormatError(source, "model.unk_token", "is not in the vocabulary");
    t.unk = u;
  }
}

Tokenizer::Impl::Prepend prepend_scheme(const json& j) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j["prepend_scheme"];
    return s == "always" ? Tokenizer::Impl::Prepend::Always
         : s == "never"  ? Tokenizer::Impl::Prepend::Never
                         : Tokenizer::Impl::Prepend::First;
  }
  return j.value("add_prefix_space", true) ? Tokenizer::Impl::Prepend::Always : Tokenizer::Impl::Prepend::Never;
}

// Llama/Mixtral's normalizer: Sequence[Prepend("▁"), Replace(" ", "▁")]; Qwen's NFC (and NFKC);
// null and an empty Sequence (DeepSeek's) are also accepted. Returns whether it writes "▁" for spaces.
bool read_normalizer(Tokenizer::Impl& t, const json& n, const std::string& source) {
  if (n.is_null()) return false;
  const json parts = type_of(n) == "Sequence" ? n.at("normalizers") : json::array({n});
  bool metaspace = false;
  for (const json& p : parts) {
    const std::string type = type_of(p);
    if (type == "NFC" || type == "NFKC") {
      // Applied before the rest (where the others are Metaspace's spaces, which no form changes).
      if (t.form) unsupported(source, "normalizer", "has two Unicode normalization forms");
      t.form = type == "NFC" ? UnicodeForm::NFC : UnicodeForm::NFKC;
    } else if (type == "Prepend" && p.value("prepend", std::string()) == kMetaspace) {
      t.prepend = Tokenizer::Impl::Prepend::Always;
      metaspace = true;
    } else if (type == "Replace" && p.contains("pattern") && p["pattern"].value("String", std::string()) == " " &&
               p.value("content", std::string()) == kMetaspace) {
      metaspace = true;
    } else {
      unsupported(source, "normalizer", "'" + type + "' is not implemented");
    }
  }
  return metaspace;
}

void read_pre_tokenizer(Tokenizer::Impl& t, const json& p, bool normalized_metaspace, const std::string& source) {
  if (p.is_null()) {
    if (!normalized_metaspace) unsupported(source, "pre_tokenizer", "is null without a Metaspace normalizer");
    t.kind = Tokenizer::Kind::Metaspace;
    t.split = false;
    if (t.prepend != Tokenizer::Impl::Prepend::Always) t.prepend = Tokenizer::Impl::Prepend::Never;
    return;
  }
  const std::string type = type_of(p);
  if (type == "ByteLevel" || type == "Sequence") {
    t.kind = Tokenizer::Kind::ByteLevel;
    t.pre = PreTokenizer::byte_level(p, source);
  } else if (type == "Metaspace") {
    if (p.value("replacement", std::string(kMetaspace)) != kMetaspace)
      unsupported(source, "pre_tokenizer.replacement", "is not U+2581");
    t.kind = Tokenizer::Kind::Metaspace;
    t.prepend = prepend_scheme(p);
    t.split = p.value("split", true);
  } else {
    unsupported(source, "pre_tokenizer.type", "'" + type + "' is not implemented");
  }
}

// A BPE without merges produces single characters only: a vocabulary with longer tokens (other than
// added tokens and byte-fallback <0xAB> tokens) means the merges were lost, not that there are none.
void check_merges_present(const Tokenizer::Impl& t, const std::string& source) {
  if (t.merges.size() > 0 || t.ignore_merges) return;
  for (const auto& entry : t.ids) {
    const std::string& tok = entry.first;
    const bool added = std::any_of(t.added.begin(), t.added.end(), [&](const auto& a) { return a.content == tok; });
    const bool byte_token = tok.size() == 6 && tok.starts_with("<0x") && tok.back() == '>';
    if (!tok.empty() && decode_utf8(tok, 0).length < tok.size() && !added && !byte_token)
      throw FormatError(source, "model.merges", "is empty, yet the vocabulary has tokens of several characters ('" + tok +
                                                    "'), which no text could then produce",
                        "the file lost its merges; take tokenizer.json from the checkpoint again");
  }
}

// The decoder must undo what the pre-tokenizer did: Mosaic decodes by the pipeline's kind, so a
// decoder of the other kind (a ByteLevel decoder after Metaspace prints 'Ġ' for spaces in HF) or
// one it does not know is refused rather than silently decoded another way. null is accepted.
void check_decoder(const Tokenizer::Impl& t, const json& d, const std::string& source) {
  if (d.is_null()) return;
  const bool byte_level = t.kind == Tokenizer::Kind::ByteLevel;
  const json parts = type_of(d) == "Sequence" ? d.at("decoders") : json::array({d});
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string type = type_of(parts[i]);
    const std::string field = type_of(d) == "Sequence" ? "decoder.decoders[" + std::to_string(i) + "].type" : "decoder.type";
    const bool fits = byte_level ? type == "ByteLevel"
                                 : (type == "Metaspace" || type == "Replace" || type == "ByteFallback" || type == "Fuse" || type == "Strip");
    if (fits) continue;
    const bool known = type == "ByteLevel" || type == "Metaspace" || type == "Replace" || type == "ByteFallback" || type == "Fuse" ||
                       type == "Strip";
    unsupported(source, field, known ? "'" + type + "' does not undo the " + (byte_level ? "ByteLevel" : "Metaspace") + " pre-tokenizer"
                                     : "'" + type + "' is not implemented");
  }
}

// Special ids the post-processor adds must be tokens, or encoding would hand out ids past the vocabulary.
void check_special_ids(const Tokenizer::Impl& t, const std::string& source) {
  for (const auto* ids : {&t.bos, &t.eos})
    for (const std::int64_t id : *ids)
      if (id < 0 || id >= static_cast<std::int64_t>(t.tokens.size()))
        throw FormatError(source, "post_processor.special_tokens", "adds id " + std::to_string(id) + ", which is not in the vocabulary");
}

void read_post_processor(Tokenizer::Impl& t, const json& p, const std::string& source) {
  if (p.is_null() || type_of(p) == "ByteLevel") return;
  if (type_of(p) == "Sequence") {
    for (const json& q : p.at("processors")) read_post_processor(t, q, source);
    return;
  }
  if (type_of(p) != "TemplateProcessing") unsupported(source, "post_processor.type", "'" + type_of(p) + "' is not implemented");
  bool after = false;
  for (const json& piece : p.at("single")) {
    if (piece.contains("Sequence")) { after = true; continue; }
    const std::string name = piece.at("SpecialToken").at("id");
    const json& special = p.at("special_tokens").at(name);
    for (const json& id : special.at("ids")) (after ? t.eos : t.bos).push_back(id.get<std::int64_t>());
  }
}

}  // namespace

void Tokenizer::Impl::emit_symbols(const std::vector<std::string>& symbols, std::vector<std::int64_t>& out) const {
  bool last_unk = false;
  for (const std::string& s : symbols) {
    const std::int64_t id = lookup(s);
    if (id >= 0) {
      out.push_back(id);
      last_unk = false;
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      std::vector<std::int64_t> bytes;
      for (unsigned char b : s) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        const std::int64_t bid = lookup(name);
        if (bid < 0) { all = false; break; }
        bytes.push_back(bid);
      }
      if (all) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        last_unk = false;
        continue;
      }
    }
    if (!unk) continue;  // HF drops a symbol it cannot represent when there is no unk token
    if (!(fuse_unk && last_unk)) out.push_back(*unk);
    last_unk = true;
  }
}

void Tokenizer::Impl::encode_segment(std::string_view text, bool first, std::vector<std::int64_t>& out) const {
  if (text.empty()) return;
  std::string formed;  // the normalizer's form, per segment between added tokens, as HF applies it
  if (form) {
    formed = normalize(text, *form);
    text = formed;
  }
  auto symbols_of = [](std::string_view word) {  // one symbol per code point
    std::vector<std::string> s;
    for (std::size_t i = 0; i < word.size();) {
      const std::size_t n = decode_utf8(word, i).length;
      s.emplace_back(word.substr(i, n));
      i += n;
    }
    return s;
  };
  auto run_bpe = [&](const std::string& word) {
    if (ignore_merges && ids.count(word)) return std::vector<std::string>{word};
    return merges.apply(symbols_of(word));
  };
  if (kind == Kind::ByteLevel) {
    // Repeated words are common in real text: their encoding is computed once per call.
    std::unordered_map<std::string_view, std::vector<std::int64_t>> memo;
    const std::vector<std::string> words = pre->split(text);
    for (const std::string& w : words) {
      auto [it, fresh] = memo.try_emplace(w);
      if (fresh) emit_symbols(run_bpe(to_byte_symbols(w)), it->second);
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return;
  }
  std::string normalized;
  if (prepend == Prepend::Always || (prepend == Prepend::First && first)) normalized = kMetaspace;
  for (char c : text) {
    if (c == ' ') normalized += kMetaspace;
    else normalized += c;
  }
  if (!split) {
    emit_symbols(run_bpe(normalized), out);
    return;
  }
  std::size_t start = 0;  // words begin at each "▁" (HF's MergedWithNext)
  for (std::size_t pos = normalized.find(kMetaspace, 1); ; pos = normalized.find(kMetaspace, pos + kMetaspace.size())) {
    const std::size_t end = pos == std::string::npos ? normalized.size() : pos;
    if (end > start) emit_symbols(run_bpe(normalized.substr(start, end - start)), out);
    if (pos == std::string::npos) break;
    start = pos;
  }
}

Tokenizer Tokenizer::parse(std::string_view text, const std::string& source) {
  json j;
  try {
    j = parse_json_bounded(text, source);
  } catch (const json::exception& e) {
    throw FormatError(source, "", std::string("is not valid JSON: ") + e.what());
  }
  auto t = std::make_shared<Impl>();
  try {
    read_model(*t, j.value("model", json()), source);
    const bool normalized_metaspace = read_normalizer(*t, j.value("normalizer", json()), source);
    read_pre_tokenizer(*t, j.value("pre_tokenizer", json()), normalized_metaspace, source);
    read_post_processor(*t, j.value("post_processor", json()), source);
    if (j.contains("truncation") && !j["truncation"].is_null()) {
      const json& tr = j["truncation"];
      if (!tr.is_object() || !json_int_in(tr.value("max_length", json()), 0, kMaxTokenId))
        throw FormatError(source, "truncation.max_length", "must be a token count from 0 to " + std::to_string(kMaxTokenId));
      const std::string direction = tr.value("direction", std::string("Right"));
      if (direction != "Right" && direction != "Left")
        throw FormatError(source, "truncation.direction", "is '" + direction + "'; HF writes Right or Left");
      if (tr.value("strategy", std::string("LongestFirst")) == "OnlySecond")
        unsupported(source, "truncation.strategy", "'OnlySecond' truncates a second sequence, which Mosaic never encodes");
      t->truncation = Impl::Truncation{tr["max_length"].get<std::int64_t>(), direction == "Left"};
    }
    for (const json& a : j.value("added_tokens", json::array())) {
      const std::string content = a.at("content");
      if (!json_int_in(a.at("id"), 0, kMaxTokenId))
        throw FormatError(source, "added_tokens", "'" + content + "' has id " + a.at("id").dump() + "; ids run from 0 to " + std::to_string(kMaxTokenId));
      const std::int64_t id = a.at("id");
      if (id >= static_cast<std::int64_t>(t->tokens.size()) + kIdSlack)
        throw FormatError(source, "added_tokens", "'" + content + "' has id " + std::to_string(id) + ", far past the vocabulary's " +
                                                      std::to_string(t->tokens.size()) + " ids");
      if (static_cast<std::size_t>(id) >= t->tokens.size()) t->tokens.resize(static_cast<std::size_t>(id) + 1);
      t->tokens[static_cast<std::size_t>(id)] = content;
      t->ids[content] = id;
      t->added.push_back({content, id, a.value("special", false)});
    }
    check_merges_present(*t, source);
    check_decoder(*t, j.value("decoder", json()), source);
    check_special_ids(*t, source);
  } catch (const json::exception& e) {
    throw FormatError(source, "", std::string("has a field of the wrong type or missing: ") + e.what());
  }
  std::stable_sort(t->added.begin(), t->added.end(), [](const Impl::Added& a, const Impl::Added& b) { return a.content.size() > b.content.size(); });
  t->is_special.assign(t->tokens.size(), false);
  t->is_added.assign(t->tokens.size(), false);
  for (const auto& a : t->added) {
    t->is_special[static_cast<std::size_t>(a.id)] = a.special;
    t->is_added[static_cast<std::size_t>(a.id)] = true;
  }
  t->json_text = std::string(text);
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  return parse(read_text_file(path, "check that the checkpoint folder holds tokenizer.json"), path.string());
}

Tokenizer Tokenizer::byte_level(const std::vector<std::string>& specials,
                                const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object(), added = json::array(), merge_list = json::array();
  std::int64_t next = 0;
  for (const std::string& s : specials) {
    vocab[s] = next;
    added.push_back({{"id", next}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
    ++next;
  }
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(static_cast<unsigned char>(b))] = next++;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back({a, b});
  }
  const json doc = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}}}};
  return parse(doc.dump(1), "byte-level BPE");
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& t = *impl_;
  std::vector<std::int64_t> out;
  if (add_special) out = t.bos;
  // Added tokens are matched in the raw text first, longest first; the text between is encoded.
  std::size_t start = 0, pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const Impl::Added* hit = nullptr;
    for (const auto& a : t.added)
      if (!a.content.empty() && text.compare(pos, a.content.size(), a.content) == 0) { hit = &a; break; }
    if (!hit) { ++pos; continue; }
    t.encode_segment(text.substr(start, pos - start), first, out);
    out.push_back(hit->id);
    first = false;
    pos += hit->content.size();
    start = pos;
  }
  t.encode_segment(text.substr(start), first, out);
  if (t.truncation) {
    const auto specials = add_special ? static_cast<std::int64_t>(t.bos.size() + t.eos.size()) : 0;
    const auto keep = static_cast<std::size_t>(std::max<std::int64_t>(0, t.truncation->max_length - specials));
    const std::size_t body = out.size() - (add_special ? t.bos.size() : 0);
    if (body > keep) {
      const auto first_body = out.begin() + static_cast<std::ptrdiff_t>(add_special ? t.bos.size() : 0);
      if (t.truncation->from_left) out.erase(first_body, first_body + static_cast<std::ptrdiff_t>(body - keep));
      else out.erase(first_body + static_cast<std::ptrdiff_t>(keep), out.end());
    }
  }
  if (add_special) out.insert(out.end(), t.eos.begin(), t.eos.end());
  return out;
}

std::string Tokenizer::decode(std::span<const std::int64_t> ids, bool keep_special, bool text_start) const {
  const Impl& t = *impl_;
  std::string out, bytes;
  for (std::int64_t id : ids) {
    // An id past the vocabulary decodes to nothing, as HF tokenizers' decode skips it: models pad their
    // embedding past the tokenizer (Qwen2's 151,936 rows for 151,665 tokens), and a sampled padding
    // id is text the model cannot mean, not a reason to fail a request.
    if (id < 0 || id >= vocab_size()) continue;
    const std::string& tok = token(id);
    const bool added = t.is_added[static_cast<std::size_t>(id)];
    if (t.is_special[static_cast<std::size_t>(id)] && !keep_special) continue;
    if (t.kind == Kind::ByteLevel) {
      // As HF's ByteLevel decoder does for each token: its symbols back to its bytes, or the token as
      // written when one of them is no byte symbol. Added tokens are kept as written (HF maps them too,
      // which garbles an added token whose text has characters beyond ASCII).
      bytes.clear();
      out += !added && from_byte_symbols(tok, bytes) ? bytes : tok;
      continue;
    }
    unsigned byte = 0;
    if (t.byte_fallback && tok.size() == 6 && std::sscanf(tok.c_str(), "<0x%2X>", &byte) == 1) {
      out += static_cast<char>(byte);
      continue;
    }
    for (std::size_t i = 0; i < tok.size();) {
      if (tok.compare(i, kMetaspace.size(), kMetaspace) == 0) { out += ' '; i += kMetaspace.size(); }
      else out += tok[i++];
    }
  }
  if (text_start && t.kind == Kind::Metaspace && t.prepend != Impl::Prepend::Never && !out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
const PreTokenizer* Tokenizer::pre_tokenizer() const { return impl_->pre ? &*impl_->pre : nullptr; }
std::int64_t Tokenizer::vocab_size() const { return static_cast<std::int64_t>(impl_->tokens.size()); }

std::optional<std::int64_t> Tokenizer::id(std::string_view token) const {
  const std::int64_t i = impl_->lookup(std::string(token));
  return i < 0 ? std::nullopt : std::optional<std::int64_t>(i);
}

const std::string& Tokenizer::token(std::int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw InvalidArgument("tokenizer", "token id " + std::to_string(id), "is outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
  return impl_->tokens[static_cast<std::size_t>(id)];
}

std::string Tokenizer::to_json() const { return impl_->json_text; }

void Tokenizer::save(const std::filesystem::path& path) const {
  write_file_atomically(path, [&](std::ostream& out) { out << impl_->json_text; });
}

}  // namespace mosaic
