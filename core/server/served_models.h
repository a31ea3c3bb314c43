#pragma once
// What a server puts behind the HTTP API: every target the store serves, with its own folder's
// tokenizer and, for an adapter or a delta folder, the base it names.
#include <vector>

#include "model/family.h"
#include "runtime/host_store.h"
#include "server/http_server.h"

namespace mosaic::server {

// Each chat template is read from the variant's folder, else (an adapter, a delta folder) from its
// base's; `chat_templates` false leaves every model on the plain format. Throws IoError when a
// folder has no readable tokenizer.json, FormatError for a template Mosaic cannot read.
std::vector<ServedModel> served_models(const Family& family, const HostStore& store, bool chat_templates = true);

}  // namespace mosaic::server
