#pragma once
// Runs a parsed chat template over its variables. Private to model/jinja and chat_template.cpp.
#include <string>

#include "model/jinja/ast.h"

namespace mosaic::jinja {

// The text `body` renders with `context`'s variables. Throws InvalidArgument with the template's
// own message when it calls raise_exception, or naming the line and what failed.
std::string render(const Body& body, const Value& context, const std::string& source);

}  // namespace mosaic::jinja
