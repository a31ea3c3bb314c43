// eval ppl: held-out perplexity of one checkpoint, or of a target served with a layout.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/quality.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "runtime/threads.h"

namespace fs = std::filesystem;

namespace mosaic::cli {

void add_eval_command(CLI::App& app) {
  auto* eval = app.add_subcommand("eval", "Evaluate output quality");
  eval->require_subcommand(1);
  auto* cmd = eval->add_subcommand("ppl", "Held-out perplexity of a variant on a domain's text");
  struct Opts { fs::path text; std::string domain; std::int64_t window = 128, max_windows = 64; int threads = 0; ServingArgs serve; };
  auto o = std::make_shared<Opts>();
  o->serve.add_to(cmd);
  cmd->add_option("--domain", o->domain, "domain name: reads <family>/heldout/<domain>.txt (forge writes these)");
  cmd->add_option("--text", o->text, "or: score this text file");
  cmd->add_option("--window", o->window, "tokens per scored window (each window starts from an empty cache)")->default_val(128);
  cmd->add_option("--max-windows", o->max_windows, "at most this many windows, spread over the text (0 = all)")->default_val(64);
  add_threads_option(cmd, o->threads, "CPU threads (0 = all cores)");
  cmd->callback([o] {
    if (o->domain.empty() && o->text.empty()) throw InvalidArgument("eval ppl", "--domain / --text", "give a domain or a text file");
    configure_threads(o->threads);
    const auto session = open_serving(o->serve);
    const Checkpoint& target = *session->family.find(session->target)->checkpoint;
    const Perplexity p = served_perplexity(*session, heldout_ids(target.dir(), o->domain, o->text, target.tokenizer_file()), o->window, o->max_windows);
    const std::string what = o->serve.model.empty()
                                 ? session->target + " served with " + std::to_string(session->family.size()) + " variants" +
                                       (o->serve.no_reconfig ? ", no reconfiguration" : "")
                                 : o->serve.model.filename().string();
    std::cout << "perplexity " << p.perplexity << "  (mean NLL " << p.mean_nll << " nats over " << p.predictions
              << " predictions in " << p.windows << " windows of " << o->window << "; " << what << " on "
              << (o->text.empty() ? "domain " + o->domain : o->text.string()) << ")\n";
  });
}

}  // namespace mosaic::cli
