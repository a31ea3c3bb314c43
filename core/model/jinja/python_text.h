#pragma once
// Values as Python writes them, which is how Jinja (and so transformers) turns them into text:
// str() for output, repr() inside containers, and json.dumps() with ensure_ascii off for `tojson`.
#include <optional>
#include <string>

#include "model/jinja/ast.h"

namespace mosaic::jinja {

std::string python_str(const Value& v);
std::string python_repr(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys); throws for undefined.
std::string python_json(const Value& v, std::optional<int> indent = std::nullopt, bool sort_keys = false);
std::string python_float(double x);

}  // namespace mosaic::jinja
