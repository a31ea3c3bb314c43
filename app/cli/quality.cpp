#include "cli/quality.h"

#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/text_file.h"
#include "model/tokenizer.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

std::vector<std::int64_t> heldout_ids(const fs::path& model_dir, const std::string& domain, const fs::path& text) {
  const fs::path file = !text.empty() ? text : model_dir.parent_path() / "heldout" / (domain + ".txt");
  if (!fs::exists(file))
    throw MissingError(file.string(), "", text.empty() ? "holds no held-out text for domain '" + domain + "'" : "does not exist",
                       "give --text FILE, or a variant of a family written by `mosaic-cli forge`");
  const std::string body = read_text_file(file);
  const fs::path tok = model_dir / "tokenizer.json";
  if (!fs::exists(tok))
    throw MissingError(tok.string(), "", "is absent: perplexity needs the variant's tokenizer", "copy the family's tokenizer.json beside config.json");
  return Tokenizer::load(tok).encode(body, /*add_special=*/false);
}

Perplexity checkpoint_perplexity(const fs::path& dir, const std::vector<std::int64_t>& ids, std::int64_t window,
                                 std::int64_t max_windows) {
  ServingArgs args;
  args.model = dir;
  const auto session = open_serving(args);
  return served_perplexity(*session, ids, window, max_windows);
}

Perplexity served_perplexity(ServingSession& s, const std::vector<std::int64_t>& ids, std::int64_t window,
                             std::int64_t max_windows) {
  // Every window a request of its own, all at once: the engine batches them.
  return perplexity(ids, window, max_windows, [&](const std::vector<std::span<const std::int64_t>>& windows) {
    std::vector<ServeRequest> requests;
    for (const auto& w : windows) requests.push_back({s.target, {.prompt = {w.begin(), w.end()}, .max_new_tokens = 0}, true});
    std::vector<Logits> out;
    for (RequestResult& r : serve_all(s, std::move(requests))) out.push_back(std::move(r.logits));
    return out;
  });
}

}  // namespace mosaic::cli
