#include "cli/quality.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/edit_distance.h"
#include "common/error.h"
#include "common/text_file.h"
#include "model/tokenizer.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

std::vector<std::int64_t> heldout_ids(const fs::path& model_dir, const std::string& domain, const fs::path& text, const fs::path& tokenizer) {
  const fs::path file = !text.empty() ? text : model_dir.parent_path() / "heldout" / (domain + ".txt");
  if (!fs::exists(file)) {
    if (!text.empty()) throw MissingError(file.string(), "", "does not exist", "give the path of a text file");
    // The domains the family has, and the nearest one.
    std::vector<std::string> domains;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(file.parent_path(), ec))
      if (e.path().extension() == ".txt") domains.push_back(e.path().stem().string());
    std::sort(domains.begin(), domains.end());
    std::string list;
    for (const auto& d : domains) list += (list.empty() ? "" : ", ") + d;
    const std::string_view near = nearest_name(domain, std::vector<std::string_view>(domains.begin(), domains.end()));
    throw MissingError(file.string(), "", "holds no held-out text for domain '" + domain + "'" +
                                              (near.empty() ? std::string() : " (did you mean '" + std::string(near) + "'?)"),
                       domains.empty() ? "give --text FILE, or a variant of a family written by `mosaic-cli forge`"
                                       : "the family has: " + list + "; or give --text FILE");
  }
  const std::string body = read_text_file(file, {}, UINTMAX_MAX);  // an evaluation text is as large as it is
  const fs::path tok = tokenizer.empty() ? model_dir / "tokenizer.json" : tokenizer;
  if (!fs::exists(tok))
    throw MissingError(tok.string(), "", "is absent: perplexity needs the variant's tokenizer", "copy the family's tokenizer.json beside config.json");
  return Tokenizer::load(tok).encode(body, /*add_special=*/false);
}

Perplexity checkpoint_perplexity(const fs::path& dir, const std::vector<std::int64_t>& ids, std::int64_t window,
                                 std::int64_t max_windows, std::uint64_t* weight_bytes) {
  ServingArgs args;
  args.model = dir;
  const auto session = open_serving(args);
  if (weight_bytes) *weight_bytes = session->runtime->weight_bytes();
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
