#pragma once
// What a server puts behind the HTTP API: every target the store serves, with its own folder's
// tokenizer and, for an adapter or a delta folder, the base it names.
#include <vector>

#include "model/family.h"
#include "runtime/host_store.h"
#include "server/http_server.h"
#include "server/openai_api.h"

namespace mosaic::server {

// Each chat template is read from the variant's folder, else (an adapter, a delta folder) from its
// base's; `chat_templates` false leaves every model on the plain format. Throws IoError when a
// folder has no readable tokenizer.json, FormatError for a template Mosaic cannot read.
std::vector<ServedModel> served_models(const Family& family, const HostStore& store, bool chat_templates = true);

// A conversation as `m` reads it: written by its chat template where it has one (the template writes
// BOS), else as plain "role: content" lines ending in "assistant:". Throws InvalidArgument (field
// "messages") where the template refuses them: roles out of order, a role it has no place for.
std::vector<std::int64_t> chat_prompt_ids(const ServedModel& m, const std::vector<ChatMessage>& messages);

}  // namespace mosaic::server
