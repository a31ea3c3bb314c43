#include "common/json_fields.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "common/error.h"
#include "common/json_int.h"

namespace mosaic {

using nlohmann::json;

std::string format_number(double x) {
  char out[32];
  std::snprintf(out, sizeof out, "%.6g", x);
  return out;
}

JsonFields::Fail JsonFields::format_error(std::string file, std::string hint) {
  return [file = std::move(file), hint = std::move(hint)](const std::string& field, const std::string& problem, bool missing) {
    if (missing) throw MissingError(file, "field '" + field + "'", problem, hint);
    throw FormatError(file, "field '" + field + "'", problem, hint);
  };
}

JsonFields::JsonFields(const json& object, Fail fail, std::string prefix)
    : object_(object), fail_(std::move(fail)), prefix_(std::move(prefix)) {}

void JsonFields::fail(const std::string& key, const std::string& problem) const {
  fail_(prefix_ + key, problem, false);
  throw std::logic_error("a JsonFields fail handler returned");
}

void JsonFields::refuse(const char* key, const json& value, const std::string& must) const {
  std::string shown = value.dump();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  fail(key, "is " + shown + "; it must be " + must);
}

const json* JsonFields::find(const char* key, bool required) const {
  if (object_.is_object() && object_.contains(key)) return &object_[key];
  if (!required) return nullptr;
  fail_(prefix_ + key, "is missing", true);
  throw std::logic_error("a JsonFields fail handler returned");
}

std::int64_t JsonFields::integer(const char* key, std::int64_t min, std::int64_t max, std::optional<std::int64_t> fallback) const {
  const json* v = find(key, !fallback);
  if (!v) return *fallback;
  if (!json_int_in(*v, min, max)) refuse(key, *v, "an integer from " + std::to_string(min) + " to " + std::to_string(max));
  return v->get<std::int64_t>();
}

double JsonFields::number(const char* key, double min, double max, std::optional<double> fallback, bool min_open) const {
  const json* v = find(key, !fallback);
  if (!v) return *fallback;
  const double x = v->is_number() ? v->get<double>() : std::nan("");
  if (!std::isfinite(x) || !(min_open ? x > min : x >= min) || !(x <= max))
    refuse(key, *v, min_open ? "a number above " + format_number(min) + " and at most " + format_number(max)
                             : "a number from " + format_number(min) + " to " + format_number(max));
  return x;
}

double JsonFields::number_from(const char* key, double least, bool open, std::optional<double> fallback) const {
  const json* v = find(key, !fallback);
  if (!v) return *fallback;
  const bool ok = v->is_number() && std::isfinite(v->get<double>()) && (open ? v->get<double>() > least : v->get<double>() >= least);
  if (!ok) refuse(key, *v, open && least == 0 ? std::string("a positive number") : "a number " + std::string(open ? "> " : "≥ ") + format_number(least));
  return v->get<double>();
}

std::string JsonFields::text(const char* key, bool non_empty, std::optional<std::string> fallback) const {
  const json* v = find(key, !fallback);
  if (!v) return *fallback;
  if (!v->is_string() || (non_empty && v->get<std::string>().empty())) refuse(key, *v, non_empty ? "a non-empty string" : "a string");
  return v->get<std::string>();
}

}  // namespace mosaic
