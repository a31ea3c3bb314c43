#pragma once
// What `eval ppl` and `bench-quality` share: a domain's held-out tokens, and the perplexity of one
// checkpoint or of a target served by the multi-variant runtime, both through the engine.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/serving_args.h"
#include "runtime/perplexity.h"

namespace mosaic::cli {

// The text is `text` when given, else <family>/heldout/<domain>.txt beside the model folder (what
// forge writes); it is encoded with `tokenizer`, by default the model folder's tokenizer.json.
// Throws MissingError naming the file and what to give instead.
std::vector<std::int64_t> heldout_ids(const std::filesystem::path& model_dir, const std::string& domain,
                                      const std::filesystem::path& text = {}, const std::filesystem::path& tokenizer = {});

// `weight_bytes`, when given, receives what the checkpoint's weights take on the device.
Perplexity checkpoint_perplexity(const std::filesystem::path& dir, const std::vector<std::int64_t>& ids,
                                 std::int64_t window, std::int64_t max_windows, std::uint64_t* weight_bytes = nullptr);
Perplexity served_perplexity(ServingSession& session, const std::vector<std::int64_t>& ids, std::int64_t window,
                             std::int64_t max_windows);

}  // namespace mosaic::cli
