#pragma once
// Typed reads of a JSON object's fields, for every parser of what people write (sweep configs,
// layouts, session files, device profiles, routing models): the checks and their wording written
// once, integers read without wrapping (json_int.h), numbers finite. What is wrong goes to the
// parser's `Fail`, which frames it (format_error: a FormatError naming the file and the field, a
// MissingError for a field that is absent).
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mosaic {

class JsonFields {
 public:
  // Called with the field's name (the reader's prefix and the key) and the problem in words; must
  // throw. `missing`: the field is absent (else it holds something it must not).
  using Fail = std::function<void(const std::string& field, const std::string& problem, bool missing)>;
  // FormatError(file, "field 'name'", problem, hint), or MissingError for an absent field.
  static Fail format_error(std::string file, std::string hint);

  // `prefix` names the object in field names: "reserve." reads "reserve.requests".
  JsonFields(const nlohmann::json& object, Fail fail, std::string prefix = {});

  bool has(const char* key) const { return object_.contains(key); }
  // Each returns `fallback` when the field is absent, and fails ("is missing") when there is none.
  // An integer in [min, max].
  std::int64_t integer(const char* key, std::int64_t min, std::int64_t max, std::optional<std::int64_t> fallback = std::nullopt) const;
  // A finite number in [min, max] ((min, max] when `min_open`).
  double number(const char* key, double min, double max, std::optional<double> fallback = std::nullopt, bool min_open = false) const;
  // A finite number above `least` (open: strictly, "a positive number" at 0), without an upper bound.
  double number_from(const char* key, double least, bool open, std::optional<double> fallback = std::nullopt) const;
  // A string; `non_empty`: "" is refused too.
  std::string text(const char* key, bool non_empty, std::optional<std::string> fallback = std::nullopt) const;
  // Fails naming `key` (with the prefix); never returns.
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json* find(const char* key, bool required) const;  // null when absent; fails when absent and required
  [[noreturn]] void refuse(const char* key, const nlohmann::json& value, const std::string& must) const;

  const nlohmann::json& object_;
  Fail fail_;
  std::string prefix_;
};

// A number as people write it: 0.001, 100, 1e+06 (not std::to_string's 0.001000).
std::string format_number(double x);

}  // namespace mosaic
