#pragma once
// What every way of running a model refuses before it starts (the engine's submit, the reference
// generation loop): the prompt's token ids and the positions it asks for.
#include <cstdint>
#include <span>
#include <string>

#include "model/model_spec.h"

namespace mosaic {

// Throws InvalidArgument, `who` its subject, for an empty prompt, a token id outside the
// vocabulary, a negative max_new_tokens, or a prompt and new tokens that pass the model's context
// (max_position_embeddings: positions past it have no trained rotary angles). `new_tokens`: what the
// caller calls max_new_tokens (a command's --max-new).
void check_request(const ModelSpec& spec, std::span<const std::int64_t> prompt, std::int64_t max_new_tokens, const std::string& who,
                   const std::string& new_tokens = "max_new_tokens");

}  // namespace mosaic
