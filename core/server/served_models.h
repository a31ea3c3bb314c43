#pragma once
// What a server puts behind the HTTP API: every target the store serves, with its own folder's
// tokenizer and, for an adapter or a delta folder, the base it names.
#include <vector>

#include "model/family.h"
#include "runtime/host_store.h"
#include "server/http_server.h"

namespace mosaic::server {

// Throws IoError when a variant's folder has no readable tokenizer.json.
std::vector<ServedModel> served_models(const Family& family, const HostStore& store);

}  // namespace mosaic::server
