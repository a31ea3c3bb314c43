#pragma once
// What `serve` and `bench-serve` put behind the HTTP API: every target the session's runtime serves,
// with its own folder's tokenizer and, for an adapter or a delta folder, the base it names.
#include <vector>

#include "cli/serving_args.h"
#include "server/http_server.h"

namespace mosaic::cli {

std::vector<server::ServedModel> served_models(const ServingSession& s);

}  // namespace mosaic::cli
