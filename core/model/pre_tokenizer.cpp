#include "model/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <optional>

#include "common/error.h"
#include "model/byte_level.h"
#include "model/regex.h"

namespace mosaic {

using nlohmann::json;

// Named, not anonymous: Step holds a Behavior, and the unity build reads this file beside others.
namespace pre_tokenizer_parts {

// SplitDelimiterBehavior: what becomes of a match and the text around it.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// A stretch of a piece, and whether the pattern matched it.
struct Mark {
  std::size_t begin, end;
  bool match;
};

[[noreturn]] void unsupported_step(const std::string& source, const std::string& field, const std::string& what) {
  throw UnsupportedError(source, field, what,
                         "Mosaic reads ByteLevel, and Sequences of Split and Digits steps ending in ByteLevel (GPT-2, DeepSeek, "
                         "Llama 3, Qwen), and Metaspace (Llama 2, Mixtral)");
}

std::string step_type(const json& j) { return j.is_object() ? j.value("type", std::string()) : std::string(); }

// The marks of a piece, as HF's Pattern::find_matches lays them: matches and the gaps between them,
// covering it.
std::vector<Mark> marks_of(const Regex& re, std::string_view piece, bool invert) {
  std::vector<Mark> marks;
  std::size_t prev = 0;
  for (const auto& [b, e] : re.matches(piece)) {
    if (prev < b) marks.push_back({prev, b, invert});
    marks.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < piece.size()) marks.push_back({prev, piece.size(), invert});
  return marks;
}

// The pieces the marks make under a behavior, as HF's NormalizedString::split joins them. Each is a
// [begin, end) of the piece; empty ones are dropped later.
std::vector<Mark> apply(std::vector<Mark> marks, Behavior behavior) {
  std::vector<Mark> out;
  bool previous = false;
  switch (behavior) {
    case Behavior::Removed:
      for (const Mark& m : marks)
        if (!m.match) out.push_back(m);
      return out;
    case Behavior::Isolated:
      return marks;
    case Behavior::Contiguous:  // runs of marks alike become one
      for (const Mark& m : marks) {
        if (!out.empty() && m.match == previous) out.back().end = m.end;
        else out.push_back(m);
        previous = m.match;
      }
      return out;
    case Behavior::MergedWithPrevious:  // a match joins the gap before it
      for (const Mark& m : marks) {
        if (!out.empty() && m.match && !previous) out.back().end = m.end;
        else out.push_back(m);
        previous = m.match;
      }
      return out;
    case Behavior::MergedWithNext:  // a match joins the gap after it
      for (auto it = marks.rbegin(); it != marks.rend(); ++it) {
        if (!out.empty() && it->match && !previous) out.back().begin = it->begin;
        else out.push_back(*it);
        previous = it->match;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

Behavior behavior_of(const json& step, const std::string& source, const std::string& field) {
  const json& b = step.value("behavior", json("Isolated"));
  const std::string name = b.is_string() ? b.get<std::string>() : b.dump();
  // HF's serde names, and the lower-case ones its Python API takes.
  if (name == "Removed" || name == "removed") return Behavior::Removed;
  if (name == "Isolated" || name == "isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious" || name == "merged_with_previous") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext" || name == "merged_with_next") return Behavior::MergedWithNext;
  if (name == "Contiguous" || name == "contiguous") return Behavior::Contiguous;
  throw FormatError(source, field + ".behavior", "is '" + name + "'; HF writes Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

}  // namespace pre_tokenizer_parts
using namespace pre_tokenizer_parts;

struct PreTokenizer::Step {
  enum class Kind { Split, ByteLevel } kind = Kind::Split;
  std::optional<Regex> pattern;   // Split (Digits is a Split on \p{N}); ByteLevel with use_regex
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel

  std::vector<std::string> apply(std::string piece) const {
    if (kind == Kind::ByteLevel && add_prefix_space && !piece.starts_with(' ')) piece.insert(piece.begin(), ' ');
    if (!pattern) return {std::move(piece)};
    std::vector<std::string> out;
    for (const Mark& m : pre_tokenizer_parts::apply(marks_of(*pattern, piece, invert), behavior))
      if (m.end > m.begin) out.push_back(piece.substr(m.begin, m.end - m.begin));
    return out;
  }
};

PreTokenizer PreTokenizer::byte_level(const json& j, const std::string& source) {
  const bool sequence = step_type(j) == "Sequence";
  const json steps = sequence ? j.value("pretokenizers", json()) : json::array({j});
  if (!steps.is_array() || steps.empty()) throw FormatError(source, "pre_tokenizer.pretokenizers", "is not a list of steps");
  auto chain = std::make_shared<std::vector<Step>>();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    const std::string field = sequence ? "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]" : "pre_tokenizer";
    const std::string type = step_type(s);
    const bool last = i + 1 == steps.size();
    Step step;
    if (type == "Split") {
      const json& pat = s.value("pattern", json());
      const bool regex = pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string();
      const bool literal = pat.is_object() && pat.contains("String") && pat["String"].is_string();
      if (!regex && !literal) throw FormatError(source, field + ".pattern", "is neither {\"Regex\": …} nor {\"String\": …}");
      step.pattern.emplace(pat[regex ? "Regex" : "String"].get<std::string>(), literal, source, field + ".pattern");
      step.behavior = behavior_of(s, source, field);
      step.invert = s.value("invert", false);
    } else if (type == "Digits") {
      // Each digit alone, or runs of digits (char::is_numeric: \p{N}).
      step.pattern.emplace(R"(\p{N})", false, source, field);
      step.behavior = s.value("individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous;
    } else if (type == "ByteLevel") {
      if (!last) unsupported_step(source, field, "is ByteLevel before other steps; Mosaic maps bytes last, as every released file does");
      step.kind = Step::Kind::ByteLevel;
      step.add_prefix_space = s.value("add_prefix_space", false);
      if (s.value("use_regex", true)) step.pattern.emplace(kGpt2Split, false, source, field);
    } else if (type == "Metaspace" || type == "Sequence") {
      unsupported_step(source, field + ".type", "'" + type + "' inside a Sequence is not implemented (Metaspace alone is)");
    } else {
      unsupported_step(source, field + ".type", "'" + type + "' is not implemented");
    }
    if (last && step.kind != Step::Kind::ByteLevel)
      unsupported_step(source, field + ".type", "'" + type + "' ends the chain; Mosaic reads byte-level BPE, whose chain ends in ByteLevel");
    chain->push_back(std::move(step));
  }
  PreTokenizer p;
  p.steps_ = std::move(chain);
  return p;
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  if (text.empty()) return {};  // HF has no piece to give a prefix space to
  std::vector<std::string> pieces{std::string(text)}, next;
  for (const Step& s : *steps_) {
    next.clear();
    for (std::string& piece : pieces)
      for (std::string& cut : s.apply(std::move(piece))) next.push_back(std::move(cut));
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace mosaic
