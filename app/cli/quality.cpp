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
  const Checkpoint ck(dir);
  const auto model = Model::load(ck);
  return perplexity(ids, window, max_windows, [&](std::span<const std::int64_t> win) {
    KvCache cache(model->spec(), 1, static_cast<std::int64_t>(win.size()));
    return forward(*model, cache, win, LogitsFor::AllPositions);
  });
}

Perplexity served_perplexity(ServingSession& s, const std::vector<std::int64_t>& ids, std::int64_t window,
                             std::int64_t max_windows) {
  RuntimeCounters counters = s.runtime->new_counters();
  return perplexity(ids, window, max_windows, [&](std::span<const std::int64_t> win) {
    KvCache cache(s.store->spec(), 1, static_cast<std::int64_t>(win.size()));
    return s.runtime->forward(s.target, cache, win, LogitsFor::AllPositions, counters);
  });
}

}  // namespace mosaic::cli
